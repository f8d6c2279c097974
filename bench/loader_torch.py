#!/usr/bin/env python3
"""PyTorch DataLoader on dtrain's shard format (docs/data_format.md): the reference for bench/loader.sh.

Same work as `dtrain data bench`: random order, one pread per record, decode u8 pixels to
(p/255 - mean)/std float32 (or tokens to int64 inputs/targets), batches in pinned memory
(pin_memory=True), optionally copied to the GPU; same workers, batch size and batch count, timed after
10 warm-up batches. Prints one line: "torch DataLoader: ... samples/s".
"""
import argparse
import os
import struct
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

# proto/shard.proto field numbers, decoded by hand so that the script needs no generated code.
def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i

def _fields(b):
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i); v = b[i:i + n]; i += n
        elif wt == 5:
            v = b[i:i + 4]; i += 4
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        else:
            raise ValueError("bad wire type")
        out.append((f, v))
    return out

def read_manifest(d):
    m = _fields(open(os.path.join(d, "manifest.pb"), "rb").read())
    schema = dict(kind=0, dims=[], mean=0.0, std=1.0, tok=1)
    shards = []
    for f, v in m:
        if f == 3:
            for sf, sv in _fields(v):
                if sf == 1: schema["kind"] = sv
                elif sf == 2:  # packed repeated int64
                    if isinstance(sv, int): schema["dims"].append(sv)
                    else:
                        j = 0
                        while j < len(sv):
                            x, j = _varint(sv, j); schema["dims"].append(x)
                elif sf == 5: schema["tok"] = sv
                elif sf == 7: schema["mean"] = struct.unpack("<f", sv)[0]
                elif sf == 8: schema["std"] = struct.unpack("<f", sv)[0]
        elif f == 4:
            shards.append(dict(_fields(v))[1].decode())
    return schema, shards

class ShardDataset(Dataset):
    def __init__(self, d):
        self.schema, files = read_manifest(d)
        self.paths, self.tables, self.starts = [], [], [0]
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as fh:
                head = fh.read(32)
                assert head[:8] == b"DTSHARD1", p
                n = struct.unpack("<Q", head[16:24])[0]
                table = np.frombuffer(fh.read(16 * n), dtype=[("off", "<u8"), ("len", "<u4"), ("crc", "<u4")])
            self.paths.append(p); self.tables.append(table); self.starts.append(self.starts[-1] + n)
        self.fds = None

    def __len__(self):
        return self.starts[-1]

    def __getitem__(self, i):
        if self.fds is None:  # opened in each worker process
            self.fds = [os.open(p, os.O_RDONLY) for p in self.paths]
        s = int(np.searchsorted(self.starts, i, side="right")) - 1
        e = self.tables[s][i - self.starts[s]]
        rec = os.pread(self.fds[s], int(e["len"]), int(e["off"]))
        if self.schema["kind"] == 1:  # IMAGE
            px = np.frombuffer(rec, dtype=np.uint8, offset=4).astype(np.float32)
            x = (px * (1.0 / 255.0) - self.schema["mean"]) / self.schema["std"]
            return torch.from_numpy(x.reshape(self.schema["dims"])), struct.unpack("<I", rec[:4])[0]
        tok = np.frombuffer(rec, dtype="<u2" if self.schema["tok"] == 1 else "<u4").astype(np.int64)
        return torch.from_numpy(tok[:-1]), torch.from_numpy(tok[1:])

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    ds = ShardDataset(a.dir)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.threads, drop_last=True,
                    pin_memory=torch.cuda.is_available(), persistent_workers=True,
                    prefetch_factor=max(1, a.prefetch // max(1, a.threads)) if a.threads > 0 else None)
    it, done = iter(dl), 0
    def next_batch():
        nonlocal it
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl); x, y = next(it)
        if a.device == "cuda":
            x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        return x, y
    for _ in range(10):
        next_batch()
    t0 = time.perf_counter()
    for _ in range(a.batches):
        next_batch()
    if a.device == "cuda":
        torch.cuda.synchronize()
    s = time.perf_counter() - t0
    print(f"torch DataLoader: device {a.device} workers {a.threads} batch {a.batch} batches {a.batches}: "
          f"{a.batches * a.batch / s:.0f} samples/s ({s:.3f} s)")

if __name__ == "__main__":
    main()
