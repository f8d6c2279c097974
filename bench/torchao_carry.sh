#!/usr/bin/env bash
# Packs torchao's Python package for the GPU machine (issue 35: torchao float8 training as the FP8 PyTorch baseline of
# bench/llama_torch.py and bench/gpt2_torch.py, flag --float8). Reads a bare mirror of github:pytorch/ao (no work tree:
# git archive) and writes .device-carry/torchao.tgz (git-ignored; carried to the device, unpacked there by
# bench/torchao_env.sh). Prints the commit and the size.
# Usage: bench/torchao_carry.sh [AO_GIT_DIR] [REF]     (defaults: /work/.mirror/pytorch+ao/repo, v0.17.0)
#
# What was found (read from ao's sources at v0.17.0 = 02105d46c61dc80a8c9d39d5836e827ba3af8439; torch 2.11 was not
# installable on the machine that wrote this, so the import was checked statically, not run):
# - Version: torchao 0.17.0 is the release built against torch 2.11 (ao's compatibility tracker, pytorch/ao issue
#   2919: "0.17.0 is ABI stable against torch 2.11"). 0.18.0 and the newest snapshot (0.19.0 dev, 36027d82d, Aug 2026)
#   also ask torch >= 2.11 for their .so files but carry gates for 2.12-2.14 elsewhere; 0.18 adds an inductor
#   min/max codegen patch applied by convert_to_float8_training (a Triton fp8-store miscompile seen from torch 2.13
#   dev on; it does nothing numerically on 2.11). Hence the default REF v0.17.0; REF=v0.18.0 works the same way.
# - float8 training is pure Python: Float8Linear casts with torch ops (compiled by inductor into Triton kernels) and
#   multiplies with core PyTorch's torch._scaled_mm (tensorwise: cuBLAS; rowwise: the CUTLASS rowwise kernel in
#   libtorch). Nothing in torchao/float8 calls torch.ops.torchao.* or an ao extension.
# - Without the compiled extension (_C*.so; this tarball has none): importing torchao.float8 first runs
#   torchao/__init__.py. With no dist-info, importlib.metadata finds no "torchao" and __version__ is "unknown", so the
#   torch-version check is skipped (no "Skipping import of cpp extensions" warning); the glob for _C*.so finds nothing,
#   so torchao.ops is not loaded there; csrc_meta_ops only registers Meta kernels, inside a try whose failure is
#   logged at DEBUG. So the import prints nothing at the default log level. torchao/__init__.py then imports
#   torchao.quantization, optim and testing (pure Python; torchao.kernel imports triton at module level: the
#   torch+cu130 wheel brings it). The ops that would need the extension (int4/sparse/mx CUDA kernels, CPU kernels)
#   are never called by float8 training.
# - Kept: torchao/**/*.py and *.pkl (kernel/configs, 3.5 KB: intmm autotuner data) and ao's LICENSE. Dropped:
#   torchao/csrc (C++/CUDA sources of the extension, not built here), torchao/experimental (ARM CPU and Apple MPS
#   kernels), torchao/_models (benchmark model zoo: SAM, Llama), test/tests/benchmarks folders, images and docs.
#   The proof that nothing dropped is needed: every module that torchao.float8 reaches through its imports,
#   module-level and inside functions, transitively (with torchao/__init__.py and its imports), is computed below
#   with Python's ast and must be in the tarball; the script fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
AO=${1:-/work/.mirror/pytorch+ao/repo}
REF=${2:-v0.17.0}
[[ -d $AO/objects ]] || { echo "torchao_carry: $AO is not a git dir (fetch github:pytorch/ao first)" >&2; exit 2; }
G=(git --git-dir="$AO")
commit=$("${G[@]}" rev-parse --verify "$REF^{commit}") || { echo "torchao_carry: no ref '$REF' in $AO" >&2; exit 2; }
git check-ignore -q .device-carry/ || { echo "torchao_carry: .device-carry/ is not git-ignored (.gitignore)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/torchao_carry_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/full" "$tmp/pkg"
"${G[@]}" archive "$commit" torchao LICENSE | tar -x -C "$tmp/full"
(cd "$tmp/full" && find torchao \( -path torchao/csrc -o -path torchao/experimental -o -path torchao/_models \
    -o -name test -o -name tests -o -name benchmarks \) -prune -o -type f \( -name '*.py' -o -name '*.pkl' \) -print |
  LC_ALL=C sort > "$tmp/kept.txt")
tar -c -C "$tmp/full" -T "$tmp/kept.txt" LICENSE | tar -x -C "$tmp/pkg"
printf '%s %s\n' "$REF" "$commit" > "$tmp/pkg/TORCHAO_COMMIT"

# Every torchao module reachable from `import torchao.float8` must be kept (imports at any depth, parents first).
python3 - "$tmp/full" "$tmp/kept.txt" <<'EOF'
import ast, os, sys
root, kept = sys.argv[1], set(open(sys.argv[2]).read().split())
def path_of(mod):
    p = os.path.join(root, *mod.split("."))
    for c in (p + ".py", os.path.join(p, "__init__.py")):
        if os.path.isfile(c):
            return c
def imported(path, mod):
    base = mod.split(".") if path.endswith("__init__.py") else mod.split(".")[:-1]
    for n in ast.walk(ast.parse(open(path).read())):
        if isinstance(n, ast.Import):
            yield from (a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            m = ".".join(base[:len(base) - n.level + 1] + ([n.module] if n.module else [])) if n.level else n.module
            yield m
            yield from (m + "." + a.name for a in n.names)  # a submodule, or just a name (then no file)
seen, todo = set(), ["torchao.float8"]
while todo:
    m = todo.pop()
    if m in seen or not m.startswith("torchao"):
        continue
    seen.add(m)
    p = path_of(m)
    if p:
        todo += [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)] + list(imported(p, m))
files = {os.path.relpath(path_of(m), root) for m in seen if path_of(m)}
missing = sorted(files - kept)
if missing:
    sys.exit("torchao_carry: modules reached from torchao.float8 but dropped: " + " ".join(missing))
print(f"torchao_carry: {len(files)} modules reached from torchao.float8, all kept ({len(kept)} files kept)")
EOF

mkdir -p .device-carry
tar -c -C "$tmp/pkg" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner . | gzip -n -9 > .device-carry/torchao.tgz
echo "torchao_carry: $REF = $commit -> .device-carry/torchao.tgz ($(du -k .device-carry/torchao.tgz | cut -f1) KiB," \
  "$(wc -l < "$tmp/kept.txt") files)"
