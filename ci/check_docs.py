#!/usr/bin/env python3
"""Keeps the docs true to the code: every file a document names exists, and every count of
contract cases or worker scenarios a document states is the count in the code.

Usage: check_docs.py  (from anywhere; reads the repository it lives in)

What it reads: README.md, ARCHITECTURE.md, every docs/*.md and every crate's `//!` module docs.

File references. A name in backticks or a Markdown link target that looks like a file of this
repository (a path with a known extension or a directory path ending in `/`) must exist:
relative to the repository root, to the document's own directory, or as the tail of a path the
repository holds (`ops/ack.rs` matches `brokers/sql/src/ops/ack.rs`). A bare file name
(`decisions.md`) must be some file's name. Absolute paths, home paths, URLs, globs and
placeholders (`<prefix>`, `N`) are not references and are not checked.

Counts. `X/Y cases` must have Y = the number of contract cases in brokertest/src/lib.rs, and
`all N cases`, `N contract cases`, `N named cases` must have N = that number; `all N scenarios`
and `N worker scenarios` must have N = the number of worker scenarios in workertest/src/lib.rs.

Exit status 1 with one line per stale reference or count.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTS = ("rs", "md", "sh", "py", "toml", "sql", "json", "html", "js", "css", "yml", "yaml", "snap", "txt")


def tracked():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [f for f in out.splitlines() if os.path.exists(os.path.join(ROOT, f))]
    dirs = set()
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return files, dirs


FILES, DIRS = tracked()
BASENAMES = {os.path.basename(f) for f in FILES}


def names_in(path, pattern):
    found = re.findall(r"^ +(" + pattern + r"),$", open(os.path.join(ROOT, path)).read(), re.M)
    if not found:
        sys.exit(f"check_docs: no names found in {path}")
    return found


CASES = len(names_in("brokertest/src/lib.rs", r"[cq]\d+_[a-z0-9_]+"))
SCENARIOS = len(names_in("workertest/src/lib.rs", r"w\d+_[a-z0-9_]+"))

PATHLIKE = re.compile(r"^[A-Za-z0-9_.\-/]+$")
EXT = re.compile(r"\.(" + "|".join(EXTS) + r")$")


def exists(ref, doc_dir):
    ref = ref.strip().rstrip("/")
    for p in (ref, os.path.normpath(os.path.join(doc_dir, ref))):
        if p in DIRS or p in FILES or os.path.exists(os.path.join(ROOT, p)):
            return True
    if "/" not in ref:
        return ref in BASENAMES or ref in {d.split("/")[-1] for d in DIRS}
    tail = "/" + ref
    return any(f.endswith(tail) for f in FILES) or any(d.endswith(tail) for d in DIRS)


def candidates(text):
    for m in re.finditer(r"`([^`\n]+)`", text):
        yield m.group(1), m.start()
    for m in re.finditer(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        yield m.group(1), m.start()


def is_reference(ref):
    if not PATHLIKE.match(ref) or ref.startswith(("/", "~", ".")) or "://" in ref:
        return False
    if ref.startswith(("-", "target/")) or ".." in ref or re.search(r"NNN|XXX", ref):
        return False
    if ref.endswith("/"):
        # A directory: only paths with a slash inside (`brokers/sql/`), not `--flag/`.
        return "/" in ref[:-1] and ref.split("/")[0] in {p.split("/")[0] for p in FILES}
    return bool(EXT.search(ref)) and not re.search(r"\.(rs|md)\.", ref)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def docs():
    yield "README.md"
    yield "ARCHITECTURE.md"
    for f in sorted(FILES):
        if f.startswith("docs/") and f.endswith(".md"):
            yield f


def module_docs():
    for f in sorted(FILES):
        if f.endswith(".rs") and "/tests/" not in f and not f.startswith("target/"):
            yield f


problems = []


def check_refs(path, text):
    doc_dir = os.path.dirname(path)
    for ref, pos in candidates(text):
        ref = ref.split("::")[0]
        if is_reference(ref) and not exists(ref, doc_dir):
            problems.append(f"{path}:{line_of(text, pos)}: names `{ref}`, which is not in the repository")


def check_counts(path, text):
    rules = [
        (r"\b(\d+)/(\d+) cases\b", lambda m: int(m.group(2)) == CASES, f"{CASES} cases"),
        (r"\ball (\d+) (?:contract )?cases\b", lambda m: int(m.group(1)) == CASES, f"{CASES} cases"),
        (r"\b(\d+) (?:contract|named contract) cases\b", lambda m: int(m.group(1)) == CASES, f"{CASES} cases"),
        (r"\ball (\d+) (?:worker )?scenarios\b", lambda m: int(m.group(1)) == SCENARIOS, f"{SCENARIOS} scenarios"),
        (r"\b(\d+) worker scenarios\b", lambda m: int(m.group(1)) == SCENARIOS, f"{SCENARIOS} scenarios"),
    ]
    for pattern, ok, want in rules:
        for m in re.finditer(pattern, text):
            if not ok(m):
                problems.append(f"{path}:{line_of(text, m.start())}: says `{m.group(0)}`; the code has {want}")


for doc in docs():
    text = open(os.path.join(ROOT, doc)).read()
    check_refs(doc, text)
    check_counts(doc, text)

for src in module_docs():
    lines = open(os.path.join(ROOT, src)).read().splitlines()
    text = "\n".join(l.strip()[3:] if l.strip().startswith("//!") else "" for l in lines)
    check_refs(src, text)
    check_counts(src, text)

if problems:
    print("\n".join(problems))
    print(f"check_docs: {len(problems)} stale reference(s) or count(s)")
    sys.exit(1)
print(f"check_docs: every file reference and count holds ({CASES} cases, {SCENARIOS} scenarios)")
