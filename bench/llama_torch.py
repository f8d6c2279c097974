"""PyTorch references for the Llama shapes (configs/smollm2_360m.yaml, llama3_1b.yaml, llama_tiny.yaml): the strongest
PyTorch we can build, in two forms, each eager or under torch.compile (default or reduce-overhead):
  --impl hand  a hand-written Llama: F.rms_norm, RoPE (HF's rotate_half), SwiGLU, grouped-query attention through
               F.scaled_dot_product_attention(enable_gqa=True), one fused QKV and one fused gate|up Linear
  --impl hf    transformers' LlamaForCausalLM (attn_implementation="sdpa")
bf16 autocast with fp32 master weights, fused AdamW (betas 0.9/0.95, wd 0.1), grad clip 1.0, TF32 on.

usage: python3 bench/llama_torch.py --shape smollm2_360m [--impl hand|hf] [--compile [--mode default|reduce-overhead]]
                                    [--batch 16] [--seq 1024] [--steps 30] [--warmup 10] [--ac none|full] [--json OUT]
                                    [--residual fp32|bf16]
                                    [--float8 none|tensorwise|rowwise [--float8-filter all|auto]]
       ... --init HF_DIR --tokens FILE.u8 --losses OUT.json --lr 3e-4     (loss curve from imported weights, real text)
Synthetic tokens unless --tokens (a byte file: records of seq+1 bytes with stride seq taken in order, like `dtrain
data convert-text` with data.shuffle false). --init loads a save_pretrained directory (HF names) into either form.
Prints one JSON line: tokens/s (timed steps only), step ms, MFU against the H200's 989 TFLOP/s dense bf16 (6 N + 6 L d T
FLOPs per token, N every parameter with the tied embedding once, d = hidden: the count bench/mfu.py uses for GPT-2)
and peak memory.
--float8 tensorwise|rowwise: torchao's float8 training (issue 35; bench/torchao_float8.py says which layers and how),
imported from $TORCHAO_PATH; the MFU still counts bf16-equivalent FLOPs against the bf16 spec.
"""
import argparse, json, math, os, time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import torchao_float8

H200_SPEC = 989e12
# hidden, layers, heads, kv heads, ffn, vocab, rope theta (eps 1e-5); tied embeddings unless in UNTIED
SHAPES = {
    "tiny": (64, 2, 4, 2, 172, 256, 10000.0),
    "smollm2_360m": (960, 32, 15, 5, 2560, 49152, 100000.0),
    "llama3_1b": (2048, 16, 32, 8, 8192, 128256, 500000.0),
    "llama3_3b": (3072, 28, 24, 8, 8192, 128256, 500000.0),
    "llama3_8b": (4096, 32, 32, 8, 14336, 128256, 500000.0),
}
UNTIED = {"llama3_8b"}


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, c, nh, nkv, ffn, eps):
        super().__init__()
        self.nh, self.nkv, self.hs, self.eps, self.ffn = nh, nkv, c // nh, eps, ffn
        self.input_layernorm = nn.Parameter(torch.ones(c))
        self.post_attention_layernorm = nn.Parameter(torch.ones(c))
        self.qkv = nn.Linear(c, (nh + 2 * nkv) * self.hs, bias=False)
        self.o_proj = nn.Linear(nh * self.hs, c, bias=False)
        self.gate_up = nn.Linear(c, 2 * ffn, bias=False)
        self.down_proj = nn.Linear(ffn, c, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = F.rms_norm(x, (c,), self.input_layernorm, self.eps)
        q, k, v = self.qkv(h).split([self.nh * self.hs, self.nkv * self.hs, self.nkv * self.hs], dim=-1)
        q = q.view(b, t, self.nh, self.hs).transpose(1, 2)
        k = k.view(b, t, self.nkv, self.hs).transpose(1, 2)
        v = v.view(b, t, self.nkv, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, self.nh * self.hs))
        gate, up = self.gate_up(F.rms_norm(x, (c,), self.post_attention_layernorm, self.eps)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, c, n_layer, nh, nkv, ffn, vocab, theta, seq, eps=1e-5, tied=True, ac="none", residual="fp32"):
        super().__init__()
        self.ac, self.residual = ac, residual
        self.embed_tokens = nn.Embedding(vocab, c)
        self.lm_head = None if tied else nn.Linear(c, vocab, bias=False)
        self.layers = nn.ModuleList(Block(c, nh, nkv, ffn, eps) for _ in range(n_layer))
        self.norm = nn.Parameter(torch.ones(c))
        self.eps = eps
        hs = c // nh
        inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed_tokens(idx)
        if self.residual == "bf16":  # the residual stream stored in bf16 (as dtrain's), not autocast's fp32
            x = x.to(torch.bfloat16)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        for layer in self.layers:
            if self.ac == "full" and self.training:  # PyTorch's activation checkpointing, one region per layer
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        x = F.rms_norm(x, (x.shape[-1],), self.norm, self.eps)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, head)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def load_hf_into_hand(model, hf_dir):
    """A save_pretrained directory (LlamaForCausalLM names) into the hand-written model (fused qkv, gate|up)."""
    from safetensors.torch import load_file
    import glob
    sd = {}
    for f in sorted(glob.glob(os.path.join(hf_dir, "*.safetensors"))):
        sd.update(load_file(f))
    out = {"embed_tokens.weight": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"]}
    for l in range(len(model.layers)):
        p = f"model.layers.{l}."
        out[f"layers.{l}.input_layernorm"] = sd[p + "input_layernorm.weight"]
        out[f"layers.{l}.post_attention_layernorm"] = sd[p + "post_attention_layernorm.weight"]
        out[f"layers.{l}.qkv.weight"] = torch.cat([sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        out[f"layers.{l}.o_proj.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[f"layers.{l}.gate_up.weight"] = torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        out[f"layers.{l}.down_proj.weight"] = sd[p + "mlp.down_proj.weight"]
    model.load_state_dict({k: v.float() for k, v in out.items()}, strict=True)


class HfLoss(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, idx, targets):
        logits = self.m(input_ids=idx).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def build(a, dev):
    c, L, nh, nkv, ffn, vocab, theta = SHAPES[a.shape]
    tied = a.shape not in UNTIED
    if a.impl == "hand":
        with torch.device(dev):  # made on the GPU: an 8B model's init on the host takes minutes
            model = Llama(c, L, nh, nkv, ffn, vocab, theta, a.seq, tied=tied, ac=a.ac, residual=a.residual)
        if a.init:
            load_hf_into_hand(model, a.init)
        return model, model, vocab
    from transformers import LlamaConfig, LlamaForCausalLM
    if a.init:
        m = LlamaForCausalLM.from_pretrained(a.init, torch_dtype=torch.float32, attn_implementation="sdpa")
    else:
        cfg = LlamaConfig(hidden_size=c, num_hidden_layers=L, num_attention_heads=nh, num_key_value_heads=nkv,
                          intermediate_size=ffn, vocab_size=vocab, rope_theta=theta, max_position_embeddings=a.seq,
                          rms_norm_eps=1e-5, tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
                          torch_dtype=torch.float32)
        m = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    m.config.use_cache = False
    if a.ac == "full":
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return HfLoss(m).to(dev), m, vocab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2_360m")
    ap.add_argument("--impl", choices=["hand", "hf"], default="hand")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--mode", default="default", help="torch.compile mode: default, reduce-overhead, ...")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--init", help="a save_pretrained directory to start from")
    ap.add_argument("--tokens", help="byte file of text: byte-level tokens read in order")
    ap.add_argument("--losses", help="write the loss of every step to this JSON file")
    ap.add_argument("--ac", choices=["none", "full"], default="none",
                    help="activation checkpointing: full = torch.utils.checkpoint around every layer")
    ap.add_argument("--residual", choices=["fp32", "bf16"], default="fp32",
                    help="--impl hand: the residual stream's dtype under autocast (fp32: the embedding's, as in "
                         "PyTorch's usual mixed precision; bf16: rounded to bf16 like dtrain's and Megatron-LM's default)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="after timing, print the CUDA kernels of 3 steps by total time")
    torchao_float8.add_args(ap)
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    fwd_model, params_owner, vocab = build(a, dev)
    if a.float8 != "none":  # Float8Linear keeps the Linear's parameters: before the optimizer and torch.compile
        f8_layers = torchao_float8.convert(fwd_model, a.float8, a.float8_filter)
        print(f"torchao float8 {a.float8} ({torchao_float8.version()}, filter {a.float8_filter}): "
              f"{len(f8_layers)} linear layers, e.g. {f8_layers[0]}", flush=True)
    n_params = sum(p.numel() for p in params_owner.parameters())
    opt = torch.optim.AdamW(params_owner.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(fwd_model, mode=None if a.mode == "default" else a.mode) if a.compile else fwd_model
    stream = None
    if a.tokens:
        raw = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.uint8).long()
        n_rec = (len(raw) - 1) // a.seq
        stream = torch.stack([raw[i * a.seq:i * a.seq + a.seq + 1] for i in range(n_rec)])
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    synth = [torch.randint(0, vocab, (a.batch, a.seq + 1), generator=g) for _ in range(8)]

    def train_step(rec):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(rec[:, :-1], rec[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params_owner.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    losses, t0 = [], None
    torch.cuda.reset_peak_memory_stats(dev)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if stream is not None:
            rec = stream[torch.arange(step * a.batch, (step + 1) * a.batch) % len(stream)]
        else:
            rec = synth[step % len(synth)]
        loss = train_step(rec.to(dev, non_blocking=True))
        if a.losses:
            losses.append(loss.item())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if a.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                train_step(rec.to(dev, non_blocking=True))
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90))
    c, L, nh, nkv, ffn, _, _ = SHAPES[a.shape]
    flops_per_token = 6 * n_params + 6 * L * c * a.seq  # 6N + attention's 6 L d T (d = heads x head size = hidden)
    tokens_per_s = a.steps * a.batch * a.seq / dt
    impl = f"{a.impl} " + (("torch.compile" + ("" if a.mode == "default" else f" ({a.mode})")) if a.compile else "eager")
    impl += "" if a.ac == "none" else f", activation checkpointing {a.ac}"
    impl += "" if a.residual == "fp32" else f", {a.residual} residual stream"
    impl += "" if a.float8 == "none" else f", torchao float8 {a.float8}" + ("" if a.float8_filter == "all" else " (auto)")
    out = {"impl": impl, "shape": a.shape, "batch": a.batch, "seq": a.seq, "params": n_params,
           "tokens_per_s": tokens_per_s, "step_ms": 1e3 * dt / a.steps,
           "mfu_spec": tokens_per_s * flops_per_token / H200_SPEC,
           "peak_mem_gib": torch.cuda.max_memory_allocated(dev) / 2**30, "torch": torch.__version__}
    if a.float8 != "none":
        out.update(float8=a.float8, float8_filter=a.float8_filter, float8_linears=len(f8_layers),
                   torchao=torchao_float8.version())
    print(json.dumps(out))
    if a.json:
        json.dump(out, open(a.json, "w"))
    if a.losses:
        json.dump(losses, open(a.losses, "w"))


if __name__ == "__main__":
    main()
