"""PyTorch reference for GPT-2 124M / 350M (configs/gpt2_124m.yaml, gpt2_350m.yaml): bf16 autocast, fused AdamW,
scaled_dot_product_attention, TF32 on, eager or torch.compile, one GPU or DDP under torchrun.

usage: python3 bench/gpt2_torch.py [--model 124m|350m] [--compile [--mode default|max-autotune-no-cudagraphs]]
                                   [--batch 16] [--seq 1024] [--steps 50] [--warmup 10] [--json OUT]
                                   [--float8 none|tensorwise|rowwise [--float8-filter all|auto]]
       torchrun --nproc-per-node 2 bench/gpt2_torch.py --compile ...        (DDP)
       ... --init W.safetensors --tokens FILE.u8 --losses OUT.json           (loss curve on real text)
Synthetic tokens unless --tokens (a byte file: byte-level tokens, records of seq+1 bytes with stride seq,
taken in order, like `dtrain data convert-text` with data.shuffle false). Prints one JSON line with
tokens/s (all ranks, timed steps only), MFU (llm.c's FLOPs per token, bench/mfu.py) against the H200's 989 TFLOP/s
dense bf16 spec and against the ~790 TFLOP/s a cuBLAS GEMM reaches on it, and peak memory.
--float8 tensorwise|rowwise: torchao's float8 training (issue 35; bench/torchao_float8.py says which layers and how),
imported from $TORCHAO_PATH; the MFU still counts bf16-equivalent FLOPs against the bf16 figures.
"""
import argparse, json, math, os, time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchao_float8
from mfu import MODELS, mfu


class Block(nn.Module):
    def __init__(self, c, nh, n_layer):
        super().__init__()
        self.nh = nh
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        for proj in (self.c_proj, self.mlp_proj):
            nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=50304, t=1024, n_layer=12, nh=12, c=768):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(t, c)
        self.h = nn.ModuleList(Block(c, nh, n_layer) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m not in (b.c_proj for b in self.h) and m not in (b.mlp_proj for b in self.h):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
            if isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="124m")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--mode", default="default", help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--init", help="load initial weights from a safetensors file (dtrain's names)")
    ap.add_argument("--tokens", help="byte file of text: byte-level tokens read in order")
    ap.add_argument("--losses", help="write the loss of every step to this JSON file")
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true", help="after timing, print the CUDA kernels of 3 steps by total time")
    torchao_float8.add_args(ap)
    a = ap.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if world > 1:
        torch.distributed.init_process_group("nccl")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    L, H, C = MODELS[a.model]
    model = GPT2(t=a.seq, n_layer=L, nh=H, c=C).to(dev)
    if a.init:
        from safetensors.torch import load_file
        model.load_state_dict(translate(load_file(a.init), model), strict=True)
    if a.float8 != "none":  # Float8Linear keeps the Linear's parameters: before the optimizer, torch.compile and DDP
        f8_layers = torchao_float8.convert(model, a.float8, a.float8_filter)
        if rank == 0:
            print(f"torchao float8 {a.float8} ({torchao_float8.version()}, filter {a.float8_filter}): "
                  f"{len(f8_layers)} linear layers, e.g. {f8_layers[0]}", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(model, mode=None if a.mode == "default" else a.mode) if a.compile else model
    if world > 1:
        fwd = torch.nn.parallel.DistributedDataParallel(fwd, device_ids=[dev.index])
    stream = None
    if a.tokens:
        raw = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.uint8).long()
        n_rec = (len(raw) - 1) // a.seq
        stream = torch.stack([raw[i * a.seq:i * a.seq + a.seq + 1] for i in range(n_rec)])
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    synth = [torch.randint(0, 50257, (a.batch, a.seq + 1), generator=g) for _ in range(8)]
    losses, t0 = [], None
    def train_step(rec):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(rec[:, :-1], rec[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats(dev)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if stream is not None:
            first = (step * world + rank) * a.batch
            rec = stream[torch.arange(first, first + a.batch) % len(stream)]
        else:
            rec = synth[step % len(synth)]
        rec = rec.to(dev, non_blocking=True)
        loss = train_step(rec)
        if a.losses:
            losses.append(loss.item())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if a.profile and rank == 0:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                train_step(rec)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90))
    tokens_per_s = a.steps * a.batch * a.seq * world / dt
    impl = ("torch.compile" + ("" if a.mode == "default" else f" ({a.mode})")) if a.compile else "torch eager"
    impl += "" if a.float8 == "none" else f", torchao float8 {a.float8}" + ("" if a.float8_filter == "all" else " (auto)")
    m_spec, m_gemm = mfu(a.model, tokens_per_s / world, a.seq)
    out = {"impl": impl, "model": a.model, "world": world, "batch": a.batch, "seq": a.seq,
           "params": n_params, "tokens_per_s": tokens_per_s, "step_ms": 1e3 * dt / a.steps,
           "mfu_spec": m_spec, "mfu_gemm": m_gemm,
           "peak_mem_gib": torch.cuda.max_memory_allocated(dev) / 2**30, "torch": torch.__version__}
    if a.float8 != "none":
        out.update(float8=a.float8, float8_filter=a.float8_filter, float8_linears=len(f8_layers),
                   torchao=torchao_float8.version())
    if rank == 0:
        print(json.dumps(out))
        if a.json:
            json.dump(out, open(a.json, "w"))
        if a.losses:
            json.dump(losses, open(a.losses, "w"))
    if world > 1:
        torch.distributed.destroy_process_group()


def translate(tensors, model):
    """dtrain's parameter names and layouts -> this module's state_dict (same names where possible)."""
    sd = model.state_dict()
    out = {}
    for k in sd:
        src = k.replace(".mlp_proj.", ".mlp.c_proj.").replace(".c_fc.", ".mlp.c_fc.").replace(".c_attn.", ".attn.c_attn.")
        src = src.replace(".c_proj.", ".attn.c_proj.") if ".mlp." not in src else src
        if src not in tensors:
            raise KeyError(f"{src} (for {k}) not in the safetensors file; it has {sorted(tensors)[:8]}...")
        t = tensors[src]
        out[k] = t.reshape(sd[k].shape) if t.shape != sd[k].shape and t.numel() == sd[k].numel() else t
    return out


if __name__ == "__main__":
    main()
