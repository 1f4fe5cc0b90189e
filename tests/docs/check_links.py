#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/*.md resolves.

    python3 tests/docs/check_links.py [FILE.md ...]

For each inline link or image (`[text](target)`, `![alt](target)`) and each reference
definition (`[label]: target`) outside fenced code blocks and inline code: a target with
a scheme (http:, https:, mailto:) is skipped; a path must name an existing file or
directory, relative to the file that holds the link; an anchor (`#slug`, alone or after a
path to a Markdown file) must be the slug of a heading in that file. Slugs follow GitHub:
the heading's text without markup, lowercased, punctuation dropped except `-` and `_`,
each space turned into `-`, and `-1`, `-2`, ... appended to repeats.
Exit code 0 when every link resolves, 1 otherwise; one line per broken link.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """The lines of text with fenced code blocks blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def heading_text(raw):
    """A heading's visible text: links reduced to their text, markup dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "")


def slug(text):
    text = heading_text(text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        lines = prose_lines(path.read_text(encoding="utf-8"))
        seen, found = {}, set()

        def add(s):
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")

        for i, line in enumerate(lines):
            m = HEADING.match(line)
            if m:
                add(slug(m.group(2)))
            elif SETEXT.match(line) and i > 0 and lines[i - 1].strip():
                add(slug(lines[i - 1]))
            for a in HTML_ANCHOR.findall(line):
                found.add(a)
        cache[path] = found
    return cache[path]


def blank_inline_code(text):
    """Inline code replaced by spaces of the same length, newlines kept."""
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def targets(path):
    """(line number, target) of every link in the file's prose."""
    text = blank_inline_code("\n".join(prose_lines(path.read_text(encoding="utf-8"))))
    for regex in (LINK, REFDEF):
        for m in regex.finditer(text):
            target = m.group(m.lastindex)
            yield text.count("\n", 0, m.start()) + 1, target


def check(path):
    errors = []
    for line, target in targets(path):
        if not target or SCHEME.match(target):
            continue
        ref, _, anchor = target.partition("#")
        dest = (path.parent / ref).resolve() if ref else path
        where = f"{path.relative_to(ROOT)}:{line}: {target}"
        if not dest.exists():
            errors.append(f"{where}: no such file {ref}")
        elif anchor:
            if dest.suffix.lower() != ".md" or not dest.is_file():
                errors.append(f"{where}: anchor into a file that is not Markdown")
            elif anchor not in anchors(dest):
                errors.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return errors


def main(argv):
    files = [pathlib.Path(a).resolve() for a in argv] or [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    errors, links = [], 0
    for f in files:
        links += sum(1 for _ in targets(f))
        errors += check(f)
    for e in errors:
        print(e)
    print(f"docs links: {len(files)} files, {links} links, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
