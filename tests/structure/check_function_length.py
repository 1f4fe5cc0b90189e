#!/usr/bin/env python3
"""No function in src/ is longer than LIMIT lines (from its `fn` line to its closing
brace), so that every decision can be read in one screen."""
import os
import re
import sys

LIMIT = 100
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
FN = re.compile(r"^\s*(pub(\([a-z]+\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+([A-Za-z0-9_]+)")


def code(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def lengths(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for j in range(i, len(lines)):
            text = code(lines[j])
            for ch in text:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
            if opened and depth == 0:
                yield m.group(6), i + 1, j - i + 1
                break
            if not opened and text.rstrip().endswith(";"):
                break


def main():
    long = []
    for root, _, names in os.walk(SRC):
        for n in names:
            if n.endswith(".rs"):
                path = os.path.join(root, n)
                long += [(size, os.path.relpath(path, SRC), line, name)
                         for name, line, size in lengths(path) if size > LIMIT]
    for size, path, line, name in sorted(long, reverse=True):
        print(f"src/{path}:{line}: fn {name} is {size} lines (limit {LIMIT})")
    if long:
        return 1
    print(f"check_function_length: every function in src/ is at most {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
