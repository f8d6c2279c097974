#!/usr/bin/env python3
"""Checks that every repository path written in a comment exists (a comment naming a moved file is a stale doc).

Scans the comments of dtrain's sources (C++/CUDA `//` and `/* */` comments, `#` comments of Python, shell and CMake
files) for words that look like a path inside this repository: a top-level folder of the repository, then `/`, then
more path, ending in a file name with an extension or in `/`. Each must exist relative to the repository root.
Placeholders (`<file>_test.cc`, `*_cmd.h`, `{a,b}`, `...`), quoted example messages ("configs/x.yaml:3: ...") and
`build/` output are skipped.

Fails (exit 1, one line per stale path: file:line: path) when any is missing.
Usage: scripts/check_comment_paths.py [REPO_ROOT]   (CI runs it in scripts/test.sh's plain stage)
"""
import os
import re
import sys

SOURCE_DIRS = ["core", "kernels", "models", "comm", "data", "storage", "runtime", "launcher", "proto", "tests",
               "scripts", "bench", "fuzz", "cmake", "examples"]
CPP = (".h", ".cc", ".cu", ".cuh", ".proto")
HASH = (".py", ".sh", ".cmake", ".yaml")
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.")


def comments(path):
    """(line number, comment text) of every comment line in `path`."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    name = os.path.basename(path)
    in_block = False
    for n, line in enumerate(lines, 1):
        if name.endswith(CPP):
            if in_block:
                end = line.find("*/")
                yield n, line if end < 0 else line[:end]
                in_block = end < 0
                continue
            start = line.find("/*")
            slash = line.find("//")
            if slash >= 0 and (start < 0 or slash < start):
                if line[max(0, slash - 1)] != ":":  # not a URL such as s3://bucket/key
                    yield n, line[slash + 2:]
            elif start >= 0:
                end = line.find("*/", start + 2)
                yield n, line[start + 2:] if end < 0 else line[start + 2:end]
                in_block = end < 0
        elif name.endswith(HASH) or name == "CMakeLists.txt":
            hash_at = line.find("#")
            if hash_at >= 0 and not line[hash_at:].startswith("#!"):
                yield n, line[hash_at + 1:]


def main(root):
    tops = "|".join(sorted({d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and
                            not d.startswith(".") and d not in ("build", "third_party")}))
    path_re = re.compile(r"(?<![\w/.\"-])((?:%s)/[\w./<>*{},+-]*[\w/>*}])" % tops)
    errors, checked = [], 0
    for top in SOURCE_DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in ("build", "__pycache__")]
            for name in sorted(files):
                if not (name.endswith(CPP + HASH) or name == "CMakeLists.txt"):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                for n, text in comments(full):
                    for m in path_re.finditer(text):
                        p = m.group(1).rstrip(".,;:)")
                        if PLACEHOLDER.search(p) or p.startswith("build/"):
                            continue
                        last = p.rstrip("/").rsplit("/", 1)[-1]
                        if not p.endswith("/") and "." not in last:
                            continue  # a word pair such as "data/checkpoint", not a file
                        checked += 1
                        if not os.path.exists(os.path.join(root, p)):
                            errors.append(f"{rel}:{n}: {p}")
    for e in errors:
        print(f"check_comment_paths: {e} does not exist")
    print(f"check_comment_paths: {checked} paths in comments, {len(errors)} missing", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
