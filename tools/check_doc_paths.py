#!/usr/bin/env python3
"""Every repository path that README.md and docs/*.md name exists.

A path is a `code span` or a Markdown link target whose first part is a top-level folder of the
repository (crates/, docs/, src/, …; a crate's own src/ and tests/ count too) or a crate's folder
(codon-ops/src/…, read under crates/).
Links resolve from the document's folder. Placeholders (<…>, *, {…}, N) are skipped. The README
must also show the CI consumer's files (tests/consumer) word for word. Exits 1 and lists each
missing path with its file and line.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = {"crates", "docs", "examples", "src", "tests", "tools", "benches", "data", "third_party", ".ci"}
CRATES = {p.name for p in (ROOT / "crates").iterdir() if p.is_dir()}
SPAN = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def candidates(token):
    token = token.rstrip("/.,:;")
    token = re.sub(r":\d+(-\d+)?$", "", token)  # file.rs:120
    token = token.split("::")[0]  # tests/cli.rs::a_test
    if not token or any(c in token for c in "<>*{}…$") or "://" in token:
        return None
    first = token.split("/")[0]
    if first in TOP and "/" in token or token in {"README.md", "Cargo.toml"}:
        # A crate's own src/ or tests/ path, as a crate's section names it.
        return [ROOT / token] + [ROOT / "crates" / c / token for c in CRATES]
    if first in CRATES and "/" in token:
        return [ROOT / "crates" / token]
    return None


def main():
    missing = []
    docs = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for token in SPAN.findall(line):
                paths = candidates(token)
                if paths and not any(p.exists() for p in paths):
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: {token}")
            for target in LINK.findall(line):
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not (doc.parent / target).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: link {target}")
    # The README's "Library" section shows the CI consumer's own files, word for word.
    readme = (ROOT / "README.md").read_text()
    for shown in ["tests/consumer/Cargo.toml", "tests/consumer/src/main.rs"]:
        if (ROOT / shown).read_text() not in readme:
            missing.append(f"README.md: {shown} is not shown word for word")
    for m in missing:
        print(m)
    print(f"doc paths: {len(missing)} missing" + ("" if missing else ", all present"))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
