#!/usr/bin/env python3
"""Reads a dtrain run's TensorBoard event files with the `tensorboard` package's own readers.

Checks that TensorBoard accepts what runtime/observe/tensorboard.cc writes (framing, CRCs, Event protos):
  1. every events.out.tfevents.* file in RUN_DIR/tensorboard (or RUN_DIR) loads through
     EventFileLoader, whose record reader verifies both masked CRC32Cs of every record and stops
     silently at the first bad one - so a bad file shows up as missing events, checked below;
  2. the first event of every file is file_version "brain.Event:2", and every event has a wall time;
  3. EventAccumulator (what TensorBoard's Scalars dashboard is built on) sees the same scalar tags,
     with the same last value per step;
  4. --expect TAG: the tag has at least one value;
  5. --metrics TAG=KEY: for every "train" record of RUN_DIR/metrics.jsonl (the last one per step, as
     restarts re-log steps), TAG's value at that step equals the record's KEY rounded to float32.
Prints each tag's count and its first and last (step, value). Exit status 0 when every check passes.

usage: python3 tests/tools/read_tensorboard.py RUN_DIR [--expect TAG]... [--metrics TAG=KEY]...
e.g.   python3 tests/tools/read_tensorboard.py runs/mlp --expect train/loss --metrics train/loss=loss
Needs `pip install tensorboard` (no TensorFlow needed).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scalar_of(value):
    """The scalar of a Summary.Value: simple_value as written, or a tensor after data_compat migration."""
    if value.HasField("simple_value"):
        return value.simple_value
    if value.HasField("tensor"):
        return float(tensor_util.make_ndarray(value.tensor).item())
    return None


def load_files(files):
    """{tag: {step: value}} from the files in name order (later writes of a step win)."""
    scalars = {}
    for path in files:
        events = list(EventFileLoader(path).Load())
        if not events:
            fail(f"{path}: no events (a bad CRC stops TensorBoard's reader at the first record)")
        if events[0].file_version != "brain.Event:2":
            fail(f"{path}: first event is not file_version 'brain.Event:2': {events[0]}")
        n = 0
        for ev in events[1:]:
            if not ev.wall_time > 0:
                fail(f"{path}: event at step {ev.step} has no wall_time")
            for v in ev.summary.value:
                x = scalar_of(v)
                if x is None:
                    fail(f"{path}: tag {v.tag!r} at step {ev.step} is not a scalar")
                scalars.setdefault(v.tag, {})[ev.step] = x
                n += 1
        print(f"{path}: {len(events)} events, {n} scalars")
    return scalars


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--expect", action="append", default=[], metavar="TAG")
    ap.add_argument("--metrics", action="append", default=[], metavar="TAG=KEY")
    args = ap.parse_args()

    tb_dir = os.path.join(args.run_dir, "tensorboard")
    if not os.path.isdir(tb_dir):
        tb_dir = args.run_dir
    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    if not files:
        fail(f"no events.out.tfevents.* files in {tb_dir}")
    scalars = load_files(files)
    if not scalars:
        fail(f"{tb_dir}: no scalars")

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    acc_tags = set(acc.Tags()["scalars"])
    if acc_tags != set(scalars):
        fail(f"EventAccumulator tags {sorted(acc_tags)} != EventFileLoader tags {sorted(scalars)}")
    for tag in sorted(scalars):
        acc_last = {e.step: e.value for e in acc.Scalars(tag)}
        for step, value in acc_last.items():
            if step in scalars[tag] and scalars[tag][step] != value:
                fail(f"{tag} at step {step}: EventAccumulator {value} != EventFileLoader {scalars[tag][step]}")
        steps = sorted(scalars[tag])
        first, last = steps[0], steps[-1]
        print(f"  {tag}: {len(steps)} steps, first ({first}, {scalars[tag][first]:.6g}), "
              f"last ({last}, {scalars[tag][last]:.6g})")

    for tag in args.expect:
        if tag not in scalars:
            fail(f"expected tag {tag!r}, found {sorted(scalars)}")

    if args.metrics:
        metrics_path = os.path.join(args.run_dir, "metrics.jsonl")
        train = {}
        with open(metrics_path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a truncated last line
                if rec.get("kind") == "train":
                    train[rec["step"]] = rec
        if not train:
            fail(f"{metrics_path}: no train records")
        for pair in args.metrics:
            tag, key = pair.split("=", 1)
            checked = 0
            for step, rec in sorted(train.items()):
                want = rec.get(key)
                if want is None:
                    continue
                got = scalars.get(tag, {}).get(step)
                if got is None:
                    fail(f"{tag}: no value at step {step} (metrics.jsonl has {key}={want})")
                if not math.isclose(got, as_float32(want), rel_tol=1e-6, abs_tol=1e-30):
                    fail(f"{tag} at step {step}: {got} != metrics.jsonl {key}={want}")
                checked += 1
            print(f"  {tag} == metrics.jsonl {key} at {checked} steps")
    print("OK")


if __name__ == "__main__":
    main()
