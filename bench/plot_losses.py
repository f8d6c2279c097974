"""Plots dtrain's and PyTorch's per-step training loss from the same initial weights on the same tokens.

usage: python3 bench/plot_losses.py DTRAIN_METRICS.jsonl TORCH_LOSSES.json OUT.png [MODEL_NAME]
Prints the mean and max |difference| over all steps and over the last 50, and the final losses.
"""
import json, sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    recs = [json.loads(l) for l in open(sys.argv[1])]
    dt = [(r["step"], r["loss"]) for r in recs if r.get("kind") == "train"]
    pt = json.load(open(sys.argv[2]))
    n = min(len(dt), len(pt))
    xs = [s for s, _ in dt[:n]]
    a, b = [l for _, l in dt[:n]], pt[:n]
    diff = [abs(x - y) for x, y in zip(a, b)]
    tail = diff[-50:]
    print(json.dumps({"steps": n, "dtrain_first": a[0], "torch_first": b[0], "dtrain_last": a[-1], "torch_last": b[-1],
                      "mean_abs_diff": sum(diff) / n, "max_abs_diff": max(diff),
                      "mean_abs_diff_last50": sum(tail) / len(tail), "max_abs_diff_last50": max(tail)}))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(xs, a, label="dtrain (bf16, cuBLASLt)", lw=1.2)
    ax.plot(xs, b, label="PyTorch (bf16 autocast, SDPA)", lw=1.2, ls="--")
    ax.set_ylabel("training loss")
    ax.set_title((sys.argv[4] if len(sys.argv) > 4 else "GPT-2 124M") + ", same initial weights, same byte-level tokens (vim docs), 1 H200")
    ax.legend()
    ax.grid(alpha=0.3)
    ax2.plot(xs, [x - y for x, y in zip(a, b)], color="gray", lw=1)
    ax2.set_ylabel("dtrain - PyTorch")
    ax2.set_xlabel("step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=110)


if __name__ == "__main__":
    main()
