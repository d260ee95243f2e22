#!/usr/bin/env python3
"""Lists functions longer than a limit (default 80 lines) in the Rust files under the given
directories: `scripts/long-fns.py crates/txn/src [LIMIT]`. A function runs from its `fn` line
to the closing brace at its own indentation."""
import os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else "crates/txn/src"
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
fn = re.compile(r"^(\s*)(pub(\([a-z]+\))? )?(const )?(async )?fn (\w+)")
found = 0
for d, _, files in os.walk(root):
    for f in sorted(files):
        if not f.endswith(".rs"):
            continue
        path = os.path.join(d, f)
        lines = open(path).read().split("\n")
        for i, l in enumerate(lines):
            m = fn.match(l)
            if not m or l.rstrip().endswith(";"):
                continue
            ind = m.group(1)
            for j in range(i + 1, len(lines)):
                if lines[j] == ind + "}":
                    n = j - i + 1
                    if n > limit:
                        print(f"{path}:{i+1}: {m.group(6)} {n} lines")
                        found += 1
                    break
sys.exit(1 if found else 0)
