"""torchao's float8 training for the PyTorch references (issue 35): the --float8 / --float8-filter flags of
bench/llama_torch.py and bench/gpt2_torch.py, and the swap of a model's nn.Linear layers for torchao's Float8Linear
(convert_to_float8_training), done before torch.compile and before the optimizer is built.

Recipes (Float8LinearConfig.from_recipe_name): tensorwise = dynamic per-tensor scales, e4m3 activations and weights,
e5m2 gradients, cuBLAS FP8 GEMMs through torch._scaled_mm (what dtrain's train.precision fp8 does); rowwise = per-row
e4m3 scales rounded to powers of 2, CUTLASS rowwise GEMMs. Both are pure Python over torch ops: no torchao extension
is needed. torchao is imported from $TORCHAO_PATH (a dir holding the torchao/ package: bench/torchao_carry.sh packs
one, bench/torchao_env.sh unpacks it) when set, else from the installed packages.

Which layers (--float8-filter):
  all   every nn.Linear whose in and out features are multiples of 16 (torch._scaled_mm's requirement), except the LM
        head (a module named lm_head or output). This is torchao's own quick-start filter (ao's
        float8_training_example.py skips its last Linear by fqn and any Linear with a dim % 16 != 0) and torchtitan's
        (filter_fqns, default ["output"], its LM head). The tied heads of GPT-2 and the small Llamas are F.linear on
        the embedding, not modules, so they stay bf16 either way.
  auto  torchao's _auto_filter_for_recipe(recipe, ["lm_head", "output"]): also skips layers its H100 tables call too
        small to gain (tensorwise: K <= 4096 and N <= 1024; rowwise: N <= 2048, or K <= 1024, or N <= 4096 and
        K <= 2048; N = out, K = in features). On GPT-2 124M that leaves c_attn and c_fc under tensorwise, none under
        rowwise.
"""
import os
import sys

RECIPES = ["none", "tensorwise", "rowwise"]
HEAD_FQNS = ["lm_head", "output"]


def add_args(ap):
    ap.add_argument("--float8", choices=RECIPES, default="none",
                    help="torchao float8 training recipe for the linear layers (needs torchao: $TORCHAO_PATH)")
    ap.add_argument("--float8-filter", choices=["all", "auto"], default="all",
                    help="all: every Linear but the LM head with dims %% 16 == 0; auto: torchao's size heuristic too")


def _import(recipe):
    path = os.environ.get("TORCHAO_PATH")
    if path:
        if not os.path.isdir(os.path.join(path, "torchao")):
            sys.exit(f"--float8 {recipe}: TORCHAO_PATH={path} holds no torchao/ package "
                     "(bench/torchao_env.sh unpacks .device-carry/torchao.tgz, made by bench/torchao_carry.sh)")
        sys.path.insert(0, path)
    try:
        import torchao.float8 as f8
    except Exception as e:  # ImportError, or a torch too old for this torchao failing inside its import
        sys.exit(f"--float8 {recipe}: cannot import torchao.float8 ({type(e).__name__}: {e}); set TORCHAO_PATH to a "
                 "dir holding the torchao/ package (bench/torchao_carry.sh, bench/torchao_env.sh) or install torchao")
    return f8


def version(path=None):
    """torchao's ref and commit from the TORCHAO_COMMIT file bench/torchao_carry.sh writes, else its __version__."""
    path = path or os.environ.get("TORCHAO_PATH")
    stamp = os.path.join(path, "TORCHAO_COMMIT") if path else None
    if stamp and os.path.isfile(stamp):
        ref, commit = open(stamp).read().split()
        return f"{ref} {commit[:12]}"
    import torchao
    return getattr(torchao, "__version__", "unknown")


def convert(model, recipe, which="all"):
    """Swaps model's eligible nn.Linear layers for Float8Linear in place (recipe tensorwise|rowwise, which all|auto).
    Returns the fqns converted. Call before torch.compile and before building the optimizer."""
    f8 = _import(recipe)
    import torch.nn as nn
    if which == "auto":
        keep = f8._auto_filter_for_recipe(recipe, filter_fqns=HEAD_FQNS)
    else:
        def keep(mod, fqn):
            if fqn.split(".")[-1] in HEAD_FQNS:
                return False
            return not isinstance(mod, nn.Linear) or (mod.in_features % 16 == 0 and mod.out_features % 16 == 0)
    converted = []

    def filt(mod, fqn):
        ok = keep(mod, fqn)
        if ok and isinstance(mod, nn.Linear):
            converted.append(fqn)
        return ok

    f8.convert_to_float8_training(model, module_filter_fn=filt, config=f8.Float8LinearConfig.from_recipe_name(recipe))
    if not converted:
        sys.exit(f"--float8 {recipe} --float8-filter {which}: no linear layer was converted (dims not multiples of 16, "
                 "or all below torchao's size thresholds)")
    return converted
