#!/usr/bin/env python3
"""Checks that dtrain's libraries depend on each other one way only (docs/architecture.md, "Modules").

Every library's folder, and the libraries it may use, are listed below in LAYERS, from the ground up.
The check fails (exit 1, one line per offence) when
  - a source file (.h/.cc/.cu/.cuh) includes a header of a library that is not among its library's
    allowed dependencies (a lower layer reaching up, or a sideways reach between peers),
  - a library's CMakeLists.txt links a dtrain library that LAYERS does not allow (so the build and this
    table cannot drift apart),
  - core/ includes <nccl.h> or <mpi.h> (their check macros belong to comm/).
Usage: scripts/check_layers.py [REPO_ROOT]   (CI runs it in scripts/test.sh's plain stage)
"""
import os
import re
import sys

# library: (folder, direct dependencies). A library may include its own headers and those of every
# library reachable through its dependencies.
LAYERS = {
    "core": ("core", []),
    "proto": ("proto", []),
    "storage": ("storage", ["core", "proto"]),
    "kernels": ("kernels", ["core"]),
    "models": ("models", ["core", "proto", "kernels"]),
    "comm": ("comm", ["core"]),
    "data": ("data", ["core", "proto", "storage"]),
    "config": ("runtime/config", ["core", "proto"]),
    "observe": ("runtime/observe", ["core", "proto"]),
    "checkpoint": ("runtime/checkpoint", ["core", "proto", "storage"]),
    "optim": ("runtime/optim", ["core", "proto", "kernels", "models", "comm", "observe"]),
    "train": ("runtime/train", ["config", "observe", "checkpoint", "optim", "data", "models", "comm", "storage"]),
    "supervise": ("launcher", ["config", "comm", "observe"]),
    "launcher": ("launcher/cli", ["supervise", "train"]),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SYSTEM_INCLUDE = re.compile(r"^\s*#\s*include\s+<(nccl|mpi)\.h>")
LINK = re.compile(r"target_link_libraries\(\s*(\S+)\s+(?:PUBLIC|PRIVATE|INTERFACE)([^)]*)\)", re.S)


def closure(lib):
    seen, todo = set(), [lib]
    while todo:
        for dep in LAYERS[todo.pop()][1]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def library_of(path):
    """The library whose folder holds `path` (longest folder wins: runtime/optim before runtime)."""
    best = None
    for lib, (folder, _) in LAYERS.items():
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(LAYERS[best][0]):
                best = lib
    return best


def main(root):
    errors = []
    allowed = {lib: closure(lib) | {lib} for lib in LAYERS}
    for lib, (folder, _) in LAYERS.items():
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                if library_of(rel) != lib:
                    continue  # a nested library's file, checked as that library
                if name == "CMakeLists.txt":
                    text = open(os.path.join(root, rel)).read()
                    for target, deps in LINK.findall(text):
                        for dep in re.findall(r"\bdtrain_(\w+)", deps):
                            if dep in LAYERS and dep not in allowed[lib]:
                                errors.append(f"{rel}: {target} links dtrain_{dep}, which {lib} may not use")
                    continue
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                with open(os.path.join(root, rel), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        if lib == "core" and SYSTEM_INCLUDE.match(line):
                            errors.append(f"{rel}:{lineno}: core includes {line.strip()} (belongs to comm/)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = library_of(m.group(1))
                        if target is not None and target not in allowed[lib]:
                            errors.append(f"{rel}:{lineno}: {lib} includes \"{m.group(1)}\" of {target} "
                                          f"(allowed: {', '.join(sorted(allowed[lib] - {lib})) or 'nothing'})")
    for e in errors:
        print("check_layers: " + e)
    if errors:
        print(f"check_layers: {len(errors)} include(s) against the layering in scripts/check_layers.py")
        return 1
    print(f"check_layers: {len(LAYERS)} libraries, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
