"""PyTorch reference for the Fashion-MNIST MLP (the same model, data, optimizer and schedule as
configs/fashion_mnist_mlp.yaml), for side-by-side samples/s and accuracy with `dtrain train`.

usage: python3 bench/mlp_torch.py --data DIR [--device cuda|cpu] [--epochs 3] [--batch 64] [--json OUT]
Prints one JSON line: samples_per_s (train steps only, first 50 steps excluded), eval accuracy.
"""
import argparse, gzip, json, math, time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(d, split):
    x = read_idx(f"{d}/{split}-images-idx3-ubyte.gz").astype(np.float32).reshape(-1, 784)
    y = read_idx(f"{d}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x / 255.0 - 0.2860) / 0.3530), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--data-on-gpu", action="store_true", help="keep the whole dataset on the device (no H2D per step)")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(1234)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=dev.type == "cuda")
    steps_per_epoch = len(xtr) // a.batch
    total = a.epochs * steps_per_epoch
    warm = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    loss_fn = nn.CrossEntropyLoss()
    if a.data_on_gpu:
        xtr, ytr = xtr.to(dev), ytr.to(dev)
    pin = dev.type == "cuda" and not a.data_on_gpu
    step, t0, timed_steps = 0, None, 0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(1234 + epoch)
        perm = torch.randperm(len(xtr), generator=g)
        for b in range(steps_per_epoch):
            idx = perm[b * a.batch:(b + 1) * a.batch].to(xtr.device)
            xb, yb = xtr[idx], ytr[idx]
            if pin:
                xb, yb = xb.pin_memory(), yb.pin_memory()
            xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            loss = loss_fn(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step == 50:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            elif step > 50:
                timed_steps += 1
        if dev.type == "cuda":
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    with torch.no_grad():
        pred = torch.cat([model(xte[i:i + 1000].to(dev)).argmax(1).cpu() for i in range(0, len(xte), 1000)])
    acc = (pred == yte).float().mean().item()
    out = {"impl": "pytorch", "device": a.device, "data_on_gpu": a.data_on_gpu, "torch": torch.__version__, "epochs": a.epochs, "batch": a.batch,
           "samples_per_s": timed_steps * a.batch / elapsed, "eval_accuracy": acc}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
