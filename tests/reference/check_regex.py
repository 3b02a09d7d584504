#!/usr/bin/env python3
"""The peer of structured/regex: whether Python's re (re.fullmatch with re.ASCII, as structured/regex.hpp reads
\\d, \\w and \\s) matches each text as the DFA said.

Usage: check_regex.py CASES.json
CASES.json: [{"pattern": "...", "texts": ["...", ...], "matches": [true, ...]}, ...]. Prints one line per text on
which re disagrees, and a last line "N texts, M matched, K disagree"; exits 1 if any disagree.
"""
import json
import re
import sys


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    texts = matched = bad = 0
    for case in cases:
        pattern = re.compile(case["pattern"], re.ASCII)
        for text, expected in zip(case["texts"], case["matches"]):
            texts += 1
            got = pattern.fullmatch(text) is not None
            matched += got
            if got != expected:
                bad += 1
                print(f"{case['pattern']!r} on {text!r}: re says {got}, the DFA {expected}")
    print(f"{texts} texts, {matched} matched, {bad} disagree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
