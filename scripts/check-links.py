#!/usr/bin/env python3
"""Checks the relative links of README.md and the book (docs/src/*.md).

Every link that is not absolute (no scheme, not mailto:) must name an existing file or
directory, relative to the file it is in; a `#anchor` on a Markdown file must be one of that
file's headings, as GitHub and mdBook spell them (lower case, punctuation dropped, spaces as
dashes). Links inside code blocks and inline code are ignored. Exit 1 on any broken link.
Usage: scripts/check-links.py [FILE.md ...] (default: README.md docs/src/*.md)
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def strip_code(text):
    """The text without fenced code blocks and inline code (kept as blank lines, so line
    numbers stay right)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return "\n".join(out)


def slug(heading):
    h = re.sub(r"<[^>]+>", "", heading.strip().lower())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # headings outside code blocks (inline code in a heading counts as its text)
        in_fence = None
        for line in text.split("\n"):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if in_fence:
                if m and m.group(1)[0] == in_fence[0]:
                    in_fence = None
                continue
            if m:
                in_fence = m.group(1)
                continue
            h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if h:
                s = slug(h.group(1).replace("`", ""))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        _anchors[path] = found
    return _anchors[path]


def check(md):
    errors = []
    with open(md, encoding="utf-8") as f:
        text = strip_code(f.read())
    # over the whole text: a link's text may wrap across lines
    targets = [(text[: m.start()].count("\n") + 1, m.group(1)) for m in LINK.finditer(text)]
    targets += [(text[: m.start()].count("\n") + 1, m.group(1)) for m in REF_DEF.finditer(text)]
    for lineno, target in targets:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # absolute: http(s), mailto, ...
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        where = f"{os.path.relpath(md, ROOT)}:{lineno}: {target}"
        if not os.path.exists(dest):
            errors.append(f"{where}: no such file {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            errors.append(f"{where}: no heading '#{anchor}' in {os.path.relpath(dest, ROOT)}")
    return errors, len(targets)


def main():
    os.chdir(ROOT)
    files = sys.argv[1:] or ["README.md"] + sorted(glob.glob("docs/src/*.md"))
    errors, links = [], 0
    for md in files:
        e, n = check(os.path.abspath(md))
        errors += e
        links += n
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} broken link(s)", file=sys.stderr)
        return 1
    print(f"links ok: {links} in {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
