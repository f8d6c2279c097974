#!/usr/bin/env python3
"""The largest Llama that fits one GPU, per memory-policy combination, from dtrain's memory plan (issue 36).

For each combination of activation checkpointing (none, selective, full), master-weight / optimizer-state dtypes
(fp32/fp32, fp32/bf16, bf16/bf16, and split/fp32: fp32 masters as bf16 weights + low halves in the state), where the optimizer state lives (optim.offload none, or cpu: host memory, only
a ring of chunks on the GPU; the host's memory is not checked here) and, with fp32 masters, when their bf16 copy is
made (model.llama.weight_cast step: every layer's, kept; layer: one layer's at a time), with the chunked loss on (model.llama.loss_chunk_tokens 1024): does the Llama-3-8B
shape fit, and how deep can its layer (hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocabulary 128256, untied) be
stacked before the plan exceeds the budget? Each answer is one `dtrain launch --dry-run` (models/memory_plan.h, the
plan the launcher checks before any rank starts): it runs on a machine without a GPU (train.device cuda plans for
CUDA's caching allocator). These are PLANNED figures: on an H200 the plan was within 0.3% of the measured peak at 8B
under each checkpointing policy (bench/results/2026-12-03-llama-8b-one-h200.md); the deeper shapes were not run.

With --gradients bf16 every combination runs with train.gradients bf16 (bf16 weight gradients, 2 bytes a parameter
less).

Usage: bench/llama_fit.py [--dtrain build/dtrain] [--budget-gib 138.7] [--batch 4] [--seq 2048] [--gradients fp32]
(--budget-gib default: an H200's 139.7 GiB less the 1 GiB dtrain leaves for the CUDA context.)
"""
import argparse
import re
import subprocess
import sys

# (train.master_weights, optim.state_dtype, optim.offload)
COMBOS = [("fp32", "fp32", "none"), ("fp32", "bf16", "none"), ("bf16", "bf16", "none"), ("fp32", "fp32", "cpu"),
          ("bf16", "fp32", "cpu"), ("bf16", "bf16", "cpu"), ("split", "fp32", "none"), ("split", "fp32", "cpu")]
POLICIES = ["none", "selective", "full"]
CAPPED = set()  # (combination..., layers) refused by dtrain's 2^34-parameter cap, not by the budget


def plan(a, layers, policy, masters, state, offload, cast):
    """The planned GiB per rank, or None when the plan does not fit the budget."""
    cmd = [a.dtrain, "launch", "--dry-run", "--nproc-per-node", "1", a.config,
           "--set", "train.device=cuda", "--set", f"train.memory_budget_gib={a.budget_gib}",
           "--set", f"model.llama.n_layer={layers}", "--set", f"model.llama.activation_checkpointing={policy}",
           "--set", f"train.master_weights={masters}", "--set", f"optim.state_dtype={state}",
           "--set", f"optim.offload={offload}", "--set", f"model.llama.weight_cast={cast}",
           "--set", f"data.batch_size={a.batch}", "--set", f"model.llama.max_seq_len={a.seq}",
           "--set", f"train.gradients={a.gradients}",
           "--set", "model.llama.loss_chunk_tokens=1024"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode == 0:
        m = re.search(r"memory plan ([0-9.]+) GiB per rank", text)
        if not m:
            sys.exit(f"llama_fit: no plan in the output of {' '.join(cmd)}:\n{text}")
        return float(m.group(1))
    if "exceeds train.memory_budget_gib" in text:
        return None
    if "parameters (2^34); make the model smaller" in text:  # dtrain's parameter cap, before memory runs out
        CAPPED.add((policy, masters, state, offload, cast, layers))
        return None
    sys.exit(f"llama_fit: {' '.join(cmd)} failed (exit {r.returncode}):\n{text}")


def params_of(layers):
    c, f, v, hs = 4096, 14336, 128256, 128
    qkv = (32 + 2 * 8) * hs
    return 2 * v * c + layers * (2 * c + qkv * c + c * c + 3 * f * c) + c


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtrain", default="build/dtrain")
    p.add_argument("--config", default="configs/llama3_8b.yaml")
    p.add_argument("--budget-gib", type=float, default=138.7)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--gradients", choices=["fp32", "bf16"], default="fp32")
    a = p.parse_args()
    print(f"budget {a.budget_gib} GiB per GPU, B x T = {a.batch} x {a.seq}, loss chunk 1024 tokens, {a.gradients} "
          "gradients; planned figures\n")
    print("| activation checkpointing | master weights | optimizer state | offload | weight cast | Llama-3-8B (32 layers): "
          "planned peak | deepest stack of 8B's layer that fits | its parameters | its planned peak |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for masters, state, offload, policy, cast in [(m, s, o, pol, c) for m, s, o in COMBOS for pol in POLICIES
                                                  for c in (["step", "layer"] if m == "fp32" else ["step"])]:
        fits = lambda layers: plan(a, layers, policy, masters, state, offload, cast)  # noqa: E731
        at8b = fits(32)
        lo, hi = 0, 1  # largest fitting depth: lo fits (0 = none does), hi does not
        while fits(hi) is not None:
            lo, hi = hi, hi * 2
            if hi > 256:
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid) is not None:
                lo = mid
            else:
                hi = mid
        deepest = fits(lo) if lo > 0 else None
        print(f"| {policy} | {masters} | {state} | {offload} | {cast if masters == 'fp32' else '-'} | "
              f"{'%.2f GiB' % at8b if at8b is not None else 'does not fit'} | "
              f"{lo if lo > 0 else '-'} layers"
              f"{' (the 2^34-parameter cap)' if (policy, masters, state, offload, cast, hi) in CAPPED else ''} | "
              f"{params_of(lo) / 1e9:.2f}B | "
              f"{'%.2f GiB' % deepest if deepest is not None else '-'} |")


if __name__ == "__main__":
    main()
