#!/usr/bin/env python3
"""The peer of structured/grammar: whether the lark package (Debian's python3-lark, an Earley parser) parses each
text with the same grammar written in Lark's syntax, as the GBNF matcher said.

Usage: check_grammar.py CASES.json
CASES.json: [{"lark": "<grammar, rule start>", "texts": ["...", ...], "matches": [true, ...]}, ...]. Prints one line
per text on which lark disagrees, and a last line "N texts, M parsed, K disagree"; exits 1 if any disagree.
"""
import json
import sys

import lark


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    texts = parsed = bad = 0
    for case in cases:
        parser = lark.Lark(case["lark"], start="start", parser="earley", lexer="dynamic")
        for text, expected in zip(case["texts"], case["matches"]):
            texts += 1
            try:
                parser.parse(text)
                got = True
            except lark.exceptions.LarkError:
                got = False
            parsed += got
            if got != expected:
                bad += 1
                print(f"{case['lark']!r} on {text!r}: lark says {got}, the matcher {expected}")
    print(f"{texts} texts, {parsed} parsed, {bad} disagree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
