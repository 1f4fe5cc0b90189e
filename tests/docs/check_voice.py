#!/usr/bin/env python3
"""Checks that the repository speaks of the product, in the present tense.

    python3 tests/docs/check_voice.py [FILE ...]

The docs, the chart and the source comments describe what leasekeeper is and does. How
it came to be (dated runs, work sessions, "seen failing", "on the old code", figures
"before" and "now") belongs in commit messages and CHANGELOG.md; measured figures with
their dates belong in docs/benchmarks.md. This check scans README.md, docs/*.md (not
docs/benchmarks.md), charts/ and the comments of src/**/*.rs for such narrative.

A line can be let through by ALLOWED (a file and a phrase on that line), for wording
that only looks like narrative. Exit code 0 when nothing is found, 1 otherwise; one
line per finding.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# What narrative looks like, each with the reason it is refused.
PATTERNS = [
    (r"\b20\d\d-\d\d-\d\d\b(?!T\d)", "a date (dated runs go to docs/benchmarks.md or CHANGELOG.md)"),
    (r"\bsession \d+\b|\bsessions?'? (?:builds?|tests|notes|merges|final tree)\b"
     r"|\bend of (?:the )?session\b|\bthe session's (?:final|merged|new)\b|\bother sessions\b",
     "a work session"),
    (r"\bhelpers?'?s?\b", "a helper (say what the code or person does)"),
    (r"\b(?:other|another|two|three|several)(?: other)? agents?'?\b|\bagents' builds\b", "an agent"),
    (r"\bseen failing\b|\bseen to fail\b", "a test's history"),
    (r"\b(?:the|an?) old (?:code|binary|elector|machine|main)\b", "the old code"),
    (r"\b(?:before|after) (?:the|this|that) (?:fix|change)\b|\(before[:,]|\bbefore: ?\d"
     r"|\d[\d.,]*\s*(?:ms|s|min|%|MiB|MB)?,? before\b[,;)]|(?:^|[.;]\s+)Before,\s"
     r"|\bbefore,? (?:and )?\d[\d.,]*\s*(?:ms|s|min|%|MiB|MB)? now\b",
     "a before/after comparison"),
    (r"\bit was \d|[(;,] was \d|\bused to\b|\bformerly\b|\bpreviously\b", "a former figure or behaviour"),
    (r"\bsince (?:20\d\d|the fix|session)\b|\bas of 20\d\d\b", "a dated change"),
    (r"\bas before\b|\bas before `", "a comparison with a former version"),
    (r"\bissues? \d+\b|\bthe issue\b|\bissue's\b|\bin the issue\b", "an issue of the tracker"),
    (r"\b(?:first|second|third|fourth) wave\b", "a work plan"),
    (r"\b(?:main|commit|branch)(?: at)? [0-9a-f]{7,40}\b|\bbranch h\d+\w*\b|\bthis branch\b", "a commit or branch"),
    (r"\bnot built yet\b|\bstill to do\b", "a work plan"),
]
CASE_SENSITIVE = ("Before,",)
COMPILED = [(re.compile(p, 0 if any(c in p for c in CASE_SENSITIVE) else re.I), why) for p, why in PATTERNS]

# Comments in Rust: benchmark figures do not belong in module docs.
RUST_ONLY = [
    (re.compile(r"\b(?:p50|p99|median)\b[^.\n]*\d|\d[\d.]*\s*(?:ms|s)\s+(?:p50|p99|median)\b", re.I), "a benchmark figure (docs/benchmarks.md has them)"),
]

# Wording that only looks like narrative: (path, phrase on the line).
ALLOWED = [
    # The voice check's own description quotes what it refuses.
    ("docs/development.md", '"seen failing", "the old code"'),
    # The node suite's figures name the command, machine and date of their run, as
    # docs/benchmarks.md's tables do.
    ("docs/workloads.md", " · Date: "),
]

# Files and doc sections being rewritten by another change at the same time, left out
# until it lands. Remove entries as they land; the list is meant to become empty.
EXCLUDED_WHILE_REWRITTEN = []
# (file, heading): the section under that heading, down to the next heading of the same
# or a higher level.
SECTIONS_EXCLUDED_WHILE_REWRITTEN = []

NOT_SCANNED = {"docs/benchmarks.md"}


def scanned_files():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield from sorted(p for p in (ROOT / "charts").rglob("*") if p.is_file())
    yield from sorted((ROOT / "src").rglob("*.rs"))


def rel(path):
    return path.relative_to(ROOT).as_posix()


def excluded(path):
    r = rel(path)
    return r in NOT_SCANNED or any(
        r == e or (e.endswith("/") and r.startswith(e)) for e in EXCLUDED_WHILE_REWRITTEN
    )


def rust_comment(line):
    """The comment part of a Rust line ('' when there is none)."""
    stripped = line.lstrip()
    if stripped.startswith("//"):
        return stripped
    m = re.search(r"\s//(?![^\"]*\"[^\"]*$)", line)
    return line[m.start():] if m else ""


def excluded_lines(path, lines):
    """Line numbers (1-based) of sections left out while they are rewritten."""
    out = set()
    for file, heading in SECTIONS_EXCLUDED_WHILE_REWRITTEN:
        if rel(path) != file:
            continue
        level = len(heading) - len(heading.lstrip("#"))
        inside, fence = False, None
        for n, line in enumerate(lines, 1):
            m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
            if m and fence is None:
                fence = m.group(1)[0]
            elif m and line.strip().startswith(fence):
                fence = None
            elif fence is None and line.strip() == heading:
                inside = True
            elif fence is None and inside and re.match(r"^#{1,%d} " % level, line):
                inside = False
            if inside:
                out.add(n)
    return out


def findings(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    skip = excluded_lines(path, lines)
    is_rust = path.suffix == ".rs"
    for n, line in enumerate(lines, 1):
        if n in skip:
            continue
        scanned = rust_comment(line) if is_rust else line
        if not scanned:
            continue
        if any(rel(path) == f and phrase in line for f, phrase in ALLOWED):
            continue
        checks = COMPILED + (RUST_ONLY if is_rust else [])
        for regex, why in checks:
            m = regex.search(scanned)
            if m:
                yield n, m.group(0), why
                break


def main(argv):
    paths = [pathlib.Path(a).resolve() for a in argv] or [
        p for p in scanned_files() if not excluded(p)
    ]
    count, files = 0, 0
    for path in paths:
        files += 1
        for n, found, why in findings(path):
            count += 1
            print(f"{rel(path)}:{n}: {found!r}: {why}")
    print(f"voice: {files} files, {count} findings")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
