#!/usr/bin/env python3
"""Checks the docs against the command line the code declares.

    python3 tests/docs/check_flags.py

The flags are read from the clap definitions in src/ (no build needed): every field
under `#[arg(...)]` with `long` is a flag named after the field in kebab-case
(`renew_interval` is `--renew-interval`), or `long = "name"` when given; `--help` and
`--version` come with clap.

1. Every `--flag` that README.md and docs/*.md name must be one of those, unless it
   belongs to another program: flags on a line of a code block, or in an inline code
   span, whose command is another program (helm, kubectl, cargo, ...), flags after the
   lone `--` of `leasekeeper run ... -- CMD`, and the few other programs' flags that
   prose names on their own (FOREIGN_FLAGS).
2. Every declared flag must appear in docs/configuration.md.

Exit code 0 when both hold, 1 otherwise; one line per problem.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
BUILTIN = {"help", "version"}

# Programs whose flags the docs show in commands (a line or code span starting with one
# of them is not leasekeeper's command line).
FOREIGN_TOOLS = {
    "apt-get", "bash", "cargo", "curl", "docker", "etcd", "etcdctl", "git", "go", "grep",
    "helm", "java", "javac", "kubectl", "kubernetes-validate", "kube-apiserver", "make",
    "man", "mariadb", "mysql", "nice", "node.sh", "pip", "promtool", "psql", "python3", "redis-cli",
    "redis-server", "runc", "setsid", "systemctl", "tcpdump", "tests/kube_node/node.sh",
    "unshare", "zkCli.sh",
}
# Other programs' flags that prose names outside such a command, each with its program.
FOREIGN_FLAGS = {
    "all-targets": "cargo clippy",
    "authorization-mode": "kube-apiserver",
    "bump-revision": "etcdutl snapshot restore",
    "candidate": "patronictl switchover",
    "cert-dir": "kube-apiserver",
    "create-namespace": "helm install",
    "feature-gates": "kube-apiserver",
    "features": "cargo",
    "ignored": "cargo test",
    "in-place": "cargo mutants",
    "kube-version": "helm template",
    "nocapture": "cargo test",
    "no-default-features": "cargo",
    "profile": "cargo",
    "release": "cargo build",
    "reuse-values": "helm upgrade",
    "set": "helm",
    "set-string": "helm",
    "strict": "helm lint, kubernetes-validate",
    "tag": "scripts/image-archive",
    "test": "cargo test",
    "test-threads": "cargo test",
    "tls-auth-clients": "redis-server",
}

ARG_START = re.compile(r"#\[arg\(")
FIELD = re.compile(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(r#)?([a-z_][a-z0-9_]*)\s*:")
LONG_NAMED = re.compile(r"\blong\s*=\s*\"([^\"]+)\"")
LONG_BARE = re.compile(r"(?:^|[(,\s])long\s*(?:[,)]|$)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
FLAG = re.compile(r"(?<![\w/#-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
ENV_ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def balanced(text, start):
    """The text from `start` (just after an opening parenthesis) to its closing one."""
    depth, i, quote = 1, start, None
    while i < len(text) and depth:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c == '"':
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    return text[start : i - 1], i


def declared_flags():
    """{flag: 'file:line'} for every long flag of the clap definitions in src/."""
    flags = {}
    for path in sorted((ROOT / "src").rglob("*.rs")):
        text = path.read_text(encoding="utf-8")
        for m in ARG_START.finditer(text):
            body, end = balanced(text, m.end())
            field = FIELD.match(text, text.index("]", end - 1) + 1)
            named = LONG_NAMED.search(body)
            if named:
                name = named.group(1)
            elif LONG_BARE.search(body) and field:
                name = field.group(2).replace("_", "-")
            else:
                continue
            line = text.count("\n", 0, m.start()) + 1
            flags.setdefault(name, f"{path.relative_to(ROOT)}:{line}")
    return flags


def command_word(code):
    """The program a command line runs: the first word after `$`, env assignments and
    wrappers such as `time`, `sudo`, `nice -n 19`."""
    words = code.strip().lstrip("$").split()
    while words and (ENV_ASSIGN.match(words[0]) or words[0] in {"time", "sudo", "exec", "env"}):
        words.pop(0)
    return words[0] if words else ""


def leasekeeper_part(code):
    """The part of a command that is leasekeeper's: what follows a lone `--` is the
    command of `leasekeeper run`, with flags of its own."""
    return re.split(r"(?:^|\s)--(?:\s|$)", code, maxsplit=1)[0]


def doc_flags(path):
    """(line, flag) of every flag a Markdown file names as leasekeeper's."""
    fence, continued, out = None, False, []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, continued = m.group(1)[0], False
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence:
                fence = None
                continue
            foreign = continued or command_word(line) in FOREIGN_TOOLS
            continued = foreign and line.rstrip().endswith("\\")
            if not foreign:
                out += [(n, f) for f in FLAG.findall(leasekeeper_part(line.split(" #")[0]))]
            continue
        prose = LINK_TARGET.sub("]()", line)
        for code in INLINE_CODE.finditer(prose):
            if command_word(code.group(2)) not in FOREIGN_TOOLS:
                out += [(n, f) for f in FLAG.findall(leasekeeper_part(code.group(2)))]
        out += [(n, f) for f in FLAG.findall(INLINE_CODE.sub(" ", prose))]
    return out


def main():
    declared = declared_flags()
    known = set(declared) | BUILTIN
    errors = []
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = 0
    for path in docs:
        for line, flag in doc_flags(path):
            named += 1
            if flag not in known and flag not in FOREIGN_FLAGS:
                errors.append(f"{path.relative_to(ROOT)}:{line}: --{flag} is no flag of leasekeeper")
    reference = set(FLAG.findall(CONFIGURATION.read_text(encoding="utf-8")))
    for flag, where in sorted(declared.items()):
        if flag not in reference:
            errors.append(f"{where}: --{flag} is missing from docs/configuration.md")
    for e in errors:
        print(e)
    print(
        f"flags: {len(declared)} declared in src/, {named} named in {len(docs)} docs, "
        f"{len(errors)} problems"
    )
    return 1 if errors or not declared else 0


if __name__ == "__main__":
    sys.exit(main())
