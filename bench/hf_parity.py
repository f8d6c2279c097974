#!/usr/bin/env python3
"""Hugging Face parity of dtrain's import and export (issue 34), for GPT-2 124M and Llama at SmolLM2-360M's shape.

For each model: transformers builds it with random weights (seed 0) and saves it with save_pretrained (fp32
safetensors; the Llama in 500 MB shards, so the sharded index is read too); on a fixed batch of token ids:
  1. transformers' fp32 logits (eager attention, TF32 off) against dtrain's fp32 logits of the same directory
     imported through `hf:DIR` (bench/model_logits, on the GPU): max relative error = max|dtrain - hf| / max|hf|
     over all B*T*V logits, must be <= 1e-4;
  2. `dtrain train --set model.init_from=hf:DIR` for one step at lr 0, then `dtrain ckpt export --format hf`:
     every tensor of the export must equal save_pretrained's, byte for byte, and the export, loaded back with
     from_pretrained, must give transformers' logits again (max relative error 0 expected, <= 1e-6 accepted).
Prints one table; exits 1 when a check fails.

usage: bench/hf_parity.py --build BUILD --out OUT [--models gpt2,llama] [--device cuda|cpu]
(bench/hf_parity.sh runs it; needs torch, transformers, safetensors, numpy)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file

MODELS = {
    # model: the dtrain config, its --set overrides, the batch, and transformers' config of the same model
    "gpt2": dict(
        title="GPT-2 124M",
        config="configs/gpt2_124m.yaml",
        sets=["data.dataset=synthetic_tokens"],
        batch=2, seq=1024, vocab=50257, shard=None,
        cls=lambda: transformers.GPT2LMHeadModel,
        hf=lambda: transformers.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                                           activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                           tie_word_embeddings=True)),
    "llama": dict(
        title="Llama @ SmolLM2-360M",
        config="configs/smollm2_360m.yaml",
        sets=["model.llama.max_seq_len=512"],
        batch=2, seq=512, vocab=49152, shard="500MB",
        cls=lambda: transformers.LlamaForCausalLM,
        hf=lambda: transformers.LlamaConfig(vocab_size=49152, hidden_size=960, intermediate_size=2560,
                                            num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
                                            max_position_embeddings=8192, rms_norm_eps=1e-5, hidden_act="silu",
                                            attention_bias=False, mlp_bias=False, tie_word_embeddings=True),
        rope_theta=100000.0),
}


# HF buffers that are no weights (dtrain's import skips them too, runtime/train/hf_import.cc): not exported.
BUFFERS = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def with_rope_theta(cfg, theta):
    """transformers 5 keeps rope_theta under rope_parameters; older versions as an attribute."""
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters["rope_theta"] = theta
    else:
        cfg.rope_theta = theta
    return cfg


def sh(cmd, log):
    """Runs cmd, its output to log; raises with the log's tail on failure."""
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = open(log).read().splitlines()[-15:]
        raise RuntimeError(f"`{' '.join(cmd)}` exited {rc}:\n  " + "\n  ".join(tail))


def hf_logits(model, tokens, device):
    with torch.no_grad():
        out = model.to(device)(torch.from_numpy(tokens).long().to(device)).logits
    return out.float().cpu().numpy().reshape(-1, out.shape[-1])


def rel_err(a, ref):
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def load_dir(d):
    """Every tensor of an HF directory (one file or the shards of the index)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        out = {}
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            out.update(load_file(os.path.join(d, shard)))
        return out
    return load_file(os.path.join(d, "model.safetensors"))


def run_model(name, m, args):
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, "hf")
    torch.manual_seed(0)
    cfg = m["hf"]()
    if "rope_theta" in m:
        with_rope_theta(cfg, m["rope_theta"])
    cfg._attn_implementation = "eager"
    model = m["cls"]()(cfg).float().eval()
    params = sum(p.numel() for p in model.parameters())
    kwargs = {"safe_serialization": True}
    if m["shard"]:
        kwargs["max_shard_size"] = m["shard"]
    model.save_pretrained(src, **kwargs)

    tokens = np.random.default_rng(0).integers(0, m["vocab"], size=(m["batch"], m["seq"]), dtype=np.int32)
    tokens.tofile(os.path.join(out, "tokens.bin"))
    ref = hf_logits(model, tokens, args.device)
    model.cpu()
    del model

    # 1. dtrain's logits of the imported directory.
    sets = [s for kv in m["sets"] + [f"data.batch_size={m['batch']}"] for s in ("--set", kv)]
    t0 = time.time()
    sh([os.path.join(args.build, "bench", "model_logits"), m["config"], "hf:" + src, os.path.join(out, "tokens.bin"),
        os.path.join(out, "dtrain_logits.bin")] + sets, os.path.join(out, "model_logits.log"))
    import_s = time.time() - t0
    dt = np.fromfile(os.path.join(out, "dtrain_logits.bin"), dtype=np.float32).reshape(ref.shape)
    logits_err = rel_err(dt, ref)
    argmax = float((dt.argmax(1) == ref.argmax(1)).mean())

    # 2. Import, no change (one step at lr 0), export; the export against save_pretrained's tensors and logits.
    dtrain = os.path.join(args.build, "dtrain")
    run_dir = os.path.join(out, "run")
    sh([dtrain, "train", m["config"]] + sets +
       ["--set", "model.init_from=hf:" + src, "--set", "train.max_steps=1", "--set", "optim.lr=0",
        "--set", "schedule.kind=constant", "--set", "schedule.warmup_steps=0", "--set", "train.precision=fp32",
        "--set", "train.grad_accum_steps=1",
        "--set", f"train.device={args.device}", "--set", "train.eval=false", "--set", "checkpoint.every_steps=0",
        "--set", "run.dir=" + run_dir], os.path.join(out, "train.log"))
    export = os.path.join(out, "export")
    sh([dtrain, "ckpt", "export", os.path.join(run_dir, "checkpoints"), "--format", "hf", "--out", export],
       os.path.join(out, "export.log"))
    a, b = load_dir(src), load_dir(export)
    a = {k: v for k, v in a.items() if not k.endswith(BUFFERS)}
    same = [k for k in a if k in b and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()]
    differ = sorted(set(a) - set(same))
    extra = sorted(set(b) - set(a))
    back = m["cls"]().from_pretrained(export, torch_dtype=torch.float32, attn_implementation="eager").eval()
    back_err = rel_err(hf_logits(back, tokens, args.device), ref)
    del back

    ok = logits_err <= 1e-4 and not differ and not extra and back_err <= 1e-6
    return dict(model=m["title"], params=params, tokens=f"{m['batch']}x{m['seq']}",
                logit_max=float(np.abs(ref).max()), logits_err=logits_err, argmax=argmax, import_s=import_s,
                tensors=f"{len(same)}/{len(a)}" + (f" (+{len(extra)} extra)" if extra else ""),
                differ=differ[:3] + extra[:3], back_err=back_err, ok=ok)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"hf_parity: transformers {transformers.__version__}, torch {torch.__version__}, {gpu}; out {args.out}")
    rows = []
    for name in args.models.split(","):
        try:
            rows.append(run_model(name, MODELS[name], args))
        except RuntimeError as e:
            print(f"{name}: FAILED: {e}")
            rows.append(dict(model=MODELS[name]["title"], ok=False))
    print()
    print("| model | params | B x T | max abs logit (HF) | dtrain vs transformers: max rel err (<= 1e-4) | argmax agree "
          "| import + forward s | export tensors byte-identical | export reloaded in transformers: max rel err | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "params" not in r:
            print(f"| {r['model']} | | | | | | | | | FAIL |")
            continue
        print(f"| {r['model']} | {r['params'] / 1e6:.1f}M | {r['tokens']} | {r['logit_max']:.4f} | {r['logits_err']:.2e} "
              f"| {r['argmax'] * 100:.2f}% | {r['import_s']:.1f} | {r['tensors']} | {r['back_err']:.2e} "
              f"| {'ok' if r['ok'] else 'FAIL'} |")
        if r["differ"]:
            print(f"  differing or extra tensors: {', '.join(r['differ'])}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
