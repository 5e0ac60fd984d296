"""Check the relative links of README.md and docs/**/*.md: each file exists and each #anchor is a heading there.

Anchors follow GitHub's rules: the heading's text lower-cased, inline markup dropped, every character but
letters, digits, spaces, '-' and '_' removed, spaces turned into '-', and a repeated anchor numbered
('-1', '-2', …). Exits 1 and lists the broken links when there are any.

    python scripts/check_doc_links.py [ROOT]
"""

from __future__ import annotations

import os
import pathlib
import re
import sys

# [text](target): text without brackets inside, target without spaces or parentheses inside
LINK = re.compile(r"\[([^\[\]]*)\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
FENCE = re.compile(r"^(```|~~~)")


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[`*]", "", text)  # code and emphasis marks; '_' stays (GitHub keeps it inside words)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> list[str]:
    """The anchors of a file's headings, in order, numbered as GitHub numbers repeats."""
    seen: dict[str, int] = {}
    out = []
    fenced = False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else f"{base}-{n}")
    return out


def links_of(markdown: str):
    fenced = False
    for number, line in enumerate(markdown.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        stripped = re.sub(r"`[^`]*`", "", line)  # a link inside inline code is not a link
        for m in LINK.finditer(stripped):
            yield number, m.group(2)


def check(root: pathlib.Path) -> list[str]:
    docs = (p for p in (root / "docs").rglob("*.md") if "results" not in p.relative_to(root).parts)
    files = [root / "README.md", *sorted(docs)]
    cache: dict[pathlib.Path, set[str]] = {}
    broken = []
    for path in files:
        text = path.read_text()
        for number, target in links_of(text):
            if re.match(r"^(https?:|mailto:)", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if file_part == "" else (path.parent / file_part)
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
                continue
            if anchor and dest.suffix == ".md":
                dest = pathlib.Path(os.path.normpath(dest))
                if dest not in cache:
                    cache[dest] = set(anchors_of(dest.read_text()))
                if anchor not in cache[dest]:
                    broken.append(f"{where} (no such heading)")
    return broken


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    broken = check(root)
    for line in broken:
        print(line)
    print(f"{len(broken)} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
