"""PyTorch reference for the Fashion-MNIST CNN of configs/fashion_mnist_cnn.yaml (models/cnn.h: conv3x3 stem,
one residual block per stage of widths 32/64/128, stride-2 blocks with 1x1 projections, global average pool,
linear head), trained the same way (AdamW 2e-3, wd 0.01, warmup 200 + cosine, batch 128 per GPU, 8 epochs),
channels-last with bf16 autocast, for side-by-side images/s and accuracy with `dtrain train`.

usage: python3 bench/cnn_torch.py [--epochs 8] [--batch 128] [--fp32] [--compile none|default|reduce-overhead|...]
                                  [--json OUT]
       torchrun --standalone --nproc-per-node 2 bench/cnn_torch.py ...     (DDP, NCCL: 128 per GPU, 256 per step)
       ... --device cpu --limit-train 2048 --epochs 1 --warmup-steps 2         (smoke test: gloo, CPU ranks)
Prints one JSON line (rank 0): images/s over the timed training steps of all ranks (the first --warmup-steps
steps excluded; the slowest rank's time), accuracy. The dataset is held on the device (no input pipeline
in the measurement).
"""
import argparse, gzip, json, math, os, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(d, split, dev):
    x = read_idx(f"{d}/{split}-images-idx3-ubyte.gz").astype(np.float32).reshape(-1, 1, 28, 28)
    y = read_idx(f"{d}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x / 255.0 - 0.2860) / 0.3530).to(dev), torch.from_numpy(y).to(dev)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class Cnn(nn.Module):
    def __init__(self, channels=(32, 64, 128), blocks=1, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels[0], 3, 1, 1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU())
        layers, cin = [], channels[0]
        for s, c in enumerate(channels):
            for b in range(blocks):
                layers.append(Block(cin, c, 2 if (s > 0 and b == 0) else 1))
                cin = c
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128, help="per rank")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast, NCHW (dtrain's precision and layout)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: gloo, for smoke tests")
    ap.add_argument("--limit-train", type=int, default=0, help="first N training images only (0 = all)")
    ap.add_argument("--warmup-steps", type=int, default=50, help="untimed steps first (cuDNN autotuning)")
    ap.add_argument("--compile", default="none", help="torch.compile mode of the model, or none (eager)")
    ap.add_argument("--json")
    a = ap.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    cuda = a.device == "cuda"
    if world > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(1234)
    torch.backends.cudnn.benchmark = True
    xtr, ytr = load(a.data, "train", dev)
    xte, yte = load(a.data, "t10k", dev)
    if a.limit_train:
        xtr, ytr = xtr[:a.limit_train], ytr[:a.limit_train]
    fmt = torch.contiguous_format if a.fp32 else torch.channels_last
    model = Cnn().to(dev, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, **({"fused": True} if cuda else {}))
    steps_per_epoch = len(xtr) // (a.batch * world)
    total, warm = a.epochs * steps_per_epoch, 200
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    # Every rank starts from the same weights (DDP broadcasts rank 0's), takes its slice of each global batch.
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None) if world > 1 \
        else model
    if a.compile != "none":
        net = torch.compile(net, mode=None if a.compile == "default" else a.compile)
    step, t0, timed, train_s = 0, None, 0, 0.0
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(1234 + epoch)).to(dev)
        net.train()
        sync()
        te = time.perf_counter()
        for b in range(steps_per_epoch):
            if step == a.warmup_steps:
                sync()
                t0 = time.perf_counter()
            g = b * world + rank
            idx = perm[g * a.batch:(g + 1) * a.batch]
            xb = xtr[idx].contiguous(memory_format=fmt)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=not a.fp32):
                loss = F.cross_entropy(net(xb), ytr[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            timed += step > a.warmup_steps
        sync()
        if t0 is not None:  # this epoch's timed part: from the later of its start and the end of warmup
            train_s += time.perf_counter() - max(te, t0)
    if timed == 0:
        raise SystemExit(f"no timed steps: {total} steps in all, --warmup-steps {a.warmup_steps}")
    if world > 1:  # all ranks' images over the slowest rank's time
        t = torch.tensor([train_s], dtype=torch.float64, device=dev)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        train_s = t.item()
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=not a.fp32):
        for i in range(0, len(xte), 1000):
            correct += (model(xte[i:i + 1000].contiguous(memory_format=fmt)).argmax(1) == yte[i:i + 1000]).sum().item()
    mode = "" if a.compile == "none" else f" torch.compile({a.compile})"
    out = {"impl": "torch " + ("fp32 NCHW" if a.fp32 else "bf16 autocast channels-last") + mode + (" DDP" if world > 1 else ""),
           "world": world, "device": a.device, "batch_per_rank": a.batch, "timed_steps": timed,
           "images_per_s": timed * a.batch * world / train_s, "accuracy": correct / len(xte), "torch": torch.__version__}
    if rank == 0:
        print(json.dumps(out))
        if a.json:
            json.dump(out, open(a.json, "w"))
    if world > 1:
        torch.distributed.destroy_process_group()

if __name__ == "__main__":
    main()
