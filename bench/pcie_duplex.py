#!/usr/bin/env python3
"""PCIe between page-locked host memory and the GPU, as optim.offload cpu uses it (issue 36): host-to-device alone,
device-to-host alone, and both at once on two streams (the offloaded update's copies in and out), in GB/s.

The reference for runtime/optim/offloaded_state.cc's streamed update: its state bytes per step over these rates is
the floor of its copy time. Usage (GPU machine): python3 bench/pcie_duplex.py [GIB per direction, default 4]
"""
import sys

import torch

gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
n = int(gib * (1 << 30))
host_in = torch.empty(n, dtype=torch.uint8, pin_memory=True)
host_out = torch.empty(n, dtype=torch.uint8, pin_memory=True)
dev_in = torch.empty(n, dtype=torch.uint8, device="cuda")
dev_out = torch.empty(n, dtype=torch.uint8, device="cuda")
h2d, d2h = torch.cuda.Stream(), torch.cuda.Stream()


def timed(copies, reps=5):
    """Seconds of the fastest of `reps` runs of `copies` (a list of (stream, fn)), all streams joined."""
    best = float("inf")
    for _ in range(reps + 1):  # the first is a warm-up
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        ends = []
        for stream, fn in copies:
            stream.wait_event(start)
            with torch.cuda.stream(stream):
                fn()
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                ends.append(e)
        torch.cuda.synchronize()
        best = min(best, max(start.elapsed_time(e) for e in ends) / 1e3)
    return best


def to_dev():
    dev_in.copy_(host_in, non_blocking=True)


def to_host():
    host_out.copy_(dev_out, non_blocking=True)


t_in = timed([(h2d, to_dev)])
t_out = timed([(d2h, to_host)])
t_both = timed([(h2d, to_dev), (d2h, to_host)])
gb = n / 1e9
print(f"PCIe, {gib:g} GiB per direction, pinned host memory, {torch.cuda.get_device_name()}:")
print(f"  host->device alone  {gb / t_in:6.1f} GB/s")
print(f"  device->host alone  {gb / t_out:6.1f} GB/s")
print(f"  both at once        {gb / t_both:6.1f} GB/s each way, {2 * gb / t_both:6.1f} GB/s together")
