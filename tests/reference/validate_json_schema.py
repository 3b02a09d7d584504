#!/usr/bin/env python3
"""The peer of structured/json_schema: validates documents against a JSON schema with the jsonschema package
(Debian's python3-jsonschema, Draft 2020-12), formats asserted: the package's own checkers (date, email, ipv4, ipv6,
uri with Debian's python3-rfc3987, uuid) and, for the formats whose checkers need packages Debian's lacks, Python's own readers: date-time and time by
datetime.fromisoformat (RFC 3339's T and offset required), hostname by RFC 1123's label rules, duration by ISO 8601's
grammar as JSON Schema's appendix A writes it.

Usage: validate_json_schema.py CASES.json
CASES.json: [{"schema": {...}, "documents": ["<JSON text>", ...]}, ...]. Prints one line per document that is not
valid JSON or that the schema refuses, and exits 1 if there was any; 0 when every document is valid.
"""
import datetime
import json
import re
import sys

import jsonschema

FORMATS = jsonschema.FormatChecker()
for _name in ("date", "email", "ipv4", "ipv6", "uri", "uuid"):
    FORMATS.checkers[_name] = jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers[_name]


def _offset_required(text: str) -> bool:
    return text.endswith("Z") or re.search(r"[+-]\d\d:\d\d$", text) is not None


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(text: str) -> bool:
    date, sep, time = text.partition("T")
    datetime.date.fromisoformat(date)
    return sep == "T" and _offset_required(text) and _time(time)


@FORMATS.checks("time", raises=ValueError)
def _time(text: str) -> bool:
    datetime.time.fromisoformat(text.replace("Z", "+00:00"))
    return _offset_required(text) and re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?.*", text) is not None


@FORMATS.checks("hostname")
def _hostname(text: str) -> bool:
    labels = text.split(".")
    return len(text) <= 253 and all(
        1 <= len(l) <= 63 and l[0] != "-" and l[-1] != "-" and all(c.isascii() and (c.isalnum() or c == "-") for c in l)
        for l in labels)


@FORMATS.checks("duration")
def _duration(text: str) -> bool:
    # dur-week / dur-date [dur-time] / dur-time, each unit's digits at least one, in order.
    if not text.startswith("P") or len(text) < 3:
        return False
    body = text[1:]
    if re.fullmatch(r"\d+W", body):
        return True
    date, _, time = body.partition("T")
    units = lambda part, order: re.fullmatch("".join(f"(\\d+{u})?" for u in order), part) is not None and part != ""
    if "T" in body and not units(time, "HMS"):
        return False
    if date and not units(date, "YMD"):
        return False
    if not date and "T" not in body:
        return False
    # Within one part the units come without gaps (Y then M then D, not Y then D: dur-year is Y [M [D]]).
    for part, order in ((date, "YMD"), (time, "HMS")):
        present = [u for u in order if u in part]
        if present and "".join(present) not in order:
            return False
    return True


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    checked = 0
    for i, case in enumerate(cases):
        validator = jsonschema.Draft202012Validator(case["schema"], format_checker=FORMATS)
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
