#!/usr/bin/env python3
"""The peer of structured/json_schema: validates documents against a JSON schema with the jsonschema package
(Debian's python3-jsonschema, Draft 2020-12).

Usage: validate_json_schema.py CASES.json
CASES.json: [{"schema": {...}, "documents": ["<JSON text>", ...]}, ...]. Prints one line per document that is not
valid JSON or that the schema refuses, and exits 1 if there was any; 0 when every document is valid.
"""
import json
import sys

import jsonschema


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    checked = 0
    for i, case in enumerate(cases):
        validator = jsonschema.Draft202012Validator(case["schema"])
        for text in case["documents"]:
            checked += 1
            try:
                doc = json.loads(text)
            except ValueError as e:
                print(f"case {i}: not JSON ({e}): {text!r}")
                bad += 1
                continue
            errors = list(validator.iter_errors(doc))
            if errors:
                print(f"case {i}: {errors[0].message}: {text!r}")
                bad += 1
    print(f"{checked} documents, {bad} refused")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
