#!/usr/bin/env python3
"""Every `sleep(` in the Rust code of tests/ says what its time is: a comment line
within the three lines above it (`// The fault: …`, `// Observed: …`, `// Pause: …`).
A test waits for a condition where one can be seen (`common::eventually`, a sidecar's
`/leader`, `Sidecar::settles_in`, the transition logs, a server's readiness); what is
left is time itself: a fault's length, a window a safety claim is observed over, a
rule of the product counted in time, or a poll's pause."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..")
ABOVE = 3
# A call of a sleep function (std::thread::sleep, tokio::time::sleep, or one imported
# by that name); not a method (`marker.sleep()`) or a definition (`fn sleep(`).
SLEEP = re.compile(r"(?<![.\w])sleep\(")
DEFINITION = re.compile(r"\bfn\s+sleep\(")


def code(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def is_comment(line):
    return line.strip().startswith("//")


def unexplained(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        text = code(line)
        if not SLEEP.search(text) or DEFINITION.search(text):
            continue
        if not any(is_comment(l) for l in lines[max(0, i - ABOVE):i]):
            yield i + 1, line.strip()


def main():
    found = []
    for root, _, names in os.walk(ROOT):
        for n in sorted(names):
            if n.endswith(".rs"):
                path = os.path.join(root, n)
                rel = os.path.relpath(path, os.path.join(ROOT, ".."))
                found += [(rel, line, text) for line, text in unexplained(path)]
    for rel, line, text in sorted(found):
        print(f"{rel}:{line}: a sleep without a comment above it saying what its time is: {text}")
    if found:
        return 1
    print(f"check_sleeps: every sleep( in tests/ has a comment within the {ABOVE} lines above it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
