#!/usr/bin/env python3
"""Checks that every citation of the design document resolves.

    python3 tests/docs/check_citations.py

Code, tests and docs cite docs/design.md as "DESIGN §N" (a section) and "invariant N"
(one of the numbered safety invariants of its §2; also "invariants N and M", "DESIGN
invariant N"). Every such citation under src/, tests/, benches/, charts/, docs/ and in
README.md must name a section heading `## N. ...` or an invariant `N. ...` of §2 that
exists in docs/design.md. A citation may wrap over a line break and a comment marker
(`//`, `///`, `//!`, `#`).
Exit code 0 when every citation resolves, 1 otherwise; one line per dangling citation.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SCANNED = ["src", "tests", "benches", "charts", "docs", "README.md"]
SUFFIXES = {".rs", ".md", ".py", ".sh", ".yaml", ".yml", ".tpl", ".txt", ".json", ".toml"}

# Whitespace, possibly across a line break and the next line's comment marker.
GAP = r"(?:\s|//[/!]?|#)+"
OPT_GAP = "(?:" + GAP + ")?"
SECTION = re.compile(r"DESIGN(?:\.md)?" + OPT_GAP + r"§\s*(\d+)(?:\s*(?:/|,|and|or)\s*§\s*(\d+))?")
INVARIANT = re.compile(
    r"\binvariants?" + GAP + r"(\d{1,2})\b((?:" + OPT_GAP + r"(?:,|and|or|to|-|–)" + OPT_GAP + r"\d{1,2}\b)*)"
)
DESIGN_HEADING = re.compile(r"^##\s+(\d+)\.\s", re.M)
DESIGN_INVARIANT = re.compile(r"^(\d+)\.\s", re.M)


def design_numbers():
    text = DESIGN.read_text(encoding="utf-8")
    sections = {int(n) for n in DESIGN_HEADING.findall(text)}
    start = re.search(r"^##\s+2\.\s.*$", text, re.M)
    if not start:
        return sections, set()
    rest = text[start.end():]
    end = re.search(r"^##\s", rest, re.M)
    body = rest[: end.start()] if end else rest
    invariants = {int(n) for n in DESIGN_INVARIANT.findall(body)}
    return sections, invariants


def files():
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and f.suffix in SUFFIXES:
                    yield f


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def citations(path):
    """(line, kind, number) of every citation in the file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in SECTION.finditer(text):
        for g in m.groups():
            if g:
                yield line_of(text, m.start()), "DESIGN §", int(g)
    for m in INVARIANT.finditer(text):
        line = line_of(text, m.start())
        yield line, "invariant ", int(m.group(1))
        for n in re.findall(r"\d+", m.group(2) or ""):
            yield line, "invariant ", int(n)


def main():
    sections, invariants = design_numbers()
    errors, count = [], 0
    for path in files():
        if path == DESIGN:
            continue
        for line, kind, number in citations(path):
            count += 1
            known = sections if kind == "DESIGN §" else invariants
            if number not in known:
                errors.append(f"{path.relative_to(ROOT)}:{line}: {kind}{number} is not in docs/design.md")
    for e in errors:
        print(e)
    print(
        f"design citations: {count} found, {len(errors)} dangling "
        f"(docs/design.md: sections {min(sections, default=0)}-{max(sections, default=0)}, "
        f"invariants {min(invariants, default=0)}-{max(invariants, default=0)})"
    )
    return 1 if errors or not sections or not invariants else 0


if __name__ == "__main__":
    sys.exit(main())
