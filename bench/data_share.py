"""The data-wait share of a run's steps, from the "train" records of its metrics.jsonl (data_ms and step_ms per
progress interval, as the progress line reports them).

usage: python3 bench/data_share.py RUN_DIR [RUN_DIR ...]

For each run: the number of intervals; the median step time; the data share over the whole run (sum of data time
over sum of step time, each interval weighted by its steps), the median interval's share and the largest one. The
first interval (warm-up: plan building, the graph captures) is left out of all of them and printed on its own.
"""
import json
import statistics
import sys


def shares(run_dir):
    records = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    train = [r for r in records if r.get("kind") == "train"]
    if len(train) < 2:
        raise SystemExit(f"{run_dir}: fewer than two progress intervals in metrics.jsonl")
    steps, prev = [], 0
    for r in train:
        steps.append(r["step"] - prev)
        prev = r["step"]
    rows = list(zip(train, steps))[1:]
    data = sum(r["data_ms"] * n for r, n in rows)
    total = sum(r["step_ms"] * n for r, n in rows)
    per = [r["data_ms"] / r["step_ms"] for r, _ in rows if r["step_ms"] > 0]
    return {
        "intervals": len(rows),
        "median_step_ms": statistics.median(r["step_ms"] for r, _ in rows),
        "whole": data / total,
        "median": statistics.median(per),
        "max": max(per),
        "first": train[0]["data_ms"] / train[0]["step_ms"],
    }


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("| run | intervals | median step | data share, whole run | median interval | largest | first interval |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in sys.argv[1:]:
        s = shares(d)
        print(f"| {d} | {s['intervals']} | {1e3 * s['median_step_ms']:.1f} us | {100 * s['whole']:.1f}% | "
              f"{100 * s['median']:.1f}% | {100 * s['max']:.1f}% | {100 * s['first']:.1f}% |")


if __name__ == "__main__":
    main()
