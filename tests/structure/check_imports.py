#!/usr/bin/env python3
"""The floors of DESIGN §1, checked on the source: no module imports from a floor
above its own, and no two modules import each other, directly or around a circle.

A module is a file under src/. An import is a `use crate::…`/`crate::…` path, a
`super::…` path, or (from main.rs) `leasekeeper::…`. `mod x;` declarations and
`pub use child::…` re-exports of a module's own children are the module's own
parts, not imports; a child's `super::` is an import of its parent.
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

# Bottom up; a module may import from its own floor or below.
FLOORS = [
    ("leaves", ["settings", "timing", "clock", "status", "backoff", "sabotage", "kube_api", "init"]),
    ("backends", ["backend"]),
    ("elector", ["elector"]),
    ("publishers", ["publish"]),
    ("config", ["config"]),
    ("injector", ["inject"]),
    ("commands", ["cmd"]),
    ("main", ["main", "lib"]),
]


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return "::".join(parts)


def floor_of(module):
    top = module.split("::")[0]
    for i, (_, tops) in enumerate(FLOORS):
        if top in tops:
            return i
    raise SystemExit(f"check_imports: module {module} is on no floor; add it to FLOORS")


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def resolve(modules, parts):
    """The longest known module that `parts` (a path from the crate root) names."""
    for n in range(len(parts), 0, -1):
        cand = "::".join(parts[:n])
        if cand in modules:
            return cand
    return None


def imports(path, module, modules):
    text = strip_comments(open(path, encoding="utf-8").read())
    # Only code outside `#[cfg(test)] mod tests` blocks matters to the floors.
    cut = re.search(r"#\[cfg\(test\)\]\s*mod tests", text)
    if cut:
        text = text[: cut.start()]
    found = set()
    own = module.split("::")
    # Expand `use a::{b, c::{d}}` roughly: take every path that starts at a root word.
    for m in re.finditer(r"\b(crate|super|leasekeeper)((?:::\{?[A-Za-z_][A-Za-z0-9_]*)+)", text):
        root, rest = m.group(1), [p.strip("{") for p in m.group(2).split("::") if p]
        if root == "super":
            base = own[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            parts = base + rest
        else:
            parts = rest
        target = resolve(modules, parts)
        if target and target != module:
            found.add(target)
    # Braced groups under a prefix: `use crate::x::{a, b::c}` names x::a, x::b too.
    for m in re.finditer(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*?)\};", text, re.S):
        root, prefix = m.group(1), [p for p in m.group(2).split("::") if p]
        base = own[:-1] + prefix if root == "super" else prefix
        for item in re.split(r"[,\s]+", re.sub(r"\{[^{}]*\}", "", m.group(3))):
            head = item.split("::")[0].strip()
            if head:
                target = resolve(modules, base + [head] + item.split("::")[1:])
                if target and target != module:
                    found.add(target)
    # A parent naming its own children (mod declarations, re-exports) is not an import.
    return {t for t in found if not t.startswith(module + "::")}


def main():
    files = []
    for root, _, names in os.walk(SRC):
        files += [os.path.join(root, n) for n in names if n.endswith(".rs")]
    modules = {module_of(f): f for f in files}
    graph = {m: imports(f, m, modules) for m, f in modules.items()}
    problems = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if floor_of(t) > floor_of(m):
                problems.append(f"upward: {m} ({FLOORS[floor_of(m)][0]}) imports {t} ({FLOORS[floor_of(t)][0]})")
    # Cycles: depth-first search with colours.
    colour, stack = {}, []

    def visit(m):
        colour[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if colour.get(t) == 1:
                problems.append("circle: " + " -> ".join(stack[stack.index(t):] + [t]))
            elif t not in colour:
                visit(t)
        stack.pop()
        colour[m] = 2

    for m in sorted(graph):
        if m not in colour:
            visit(m)
    edges = sum(len(t) for t in graph.values())
    if problems:
        print("\n".join(problems))
        print(f"check_imports: {len(problems)} problem(s) in {len(graph)} modules, {edges} imports")
        return 1
    print(f"check_imports: {len(graph)} modules, {edges} imports, no circle, nothing upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
