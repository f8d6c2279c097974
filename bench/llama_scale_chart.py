"""Cost against size for bench/llama_scale.sh's scale stage: one row per run log, and a chart.

usage: python3 bench/llama_scale_chart.py OUT.png scale_SHAPE.log...

Per run (configs/SHAPE.yaml at B x T = 4 x 2048): parameters (the trainer's "model llama: N parameters" line),
tokens/s and step time of the last progress line, the allocator's measured peak, and the model FLOP rate on the
6N + 6 L d T count per token (N parameters with the head, L layers, d hidden, T 2048: the attention score and value
products, causal mask not discounted, as bench/results/2026-12-03-llama-8b-one-h200.md counts), with MFU against the
H200's 989 TFLOP/s dense bf16. The chart: model TFLOP/s (tokens/s x FLOPs per token) against parameters: flat or
rising means the cost grows no faster than the work.
"""
import re
import sys

PEAK_TFLOPS = 989.0
T = 2048


def config_int(shape, key):
    text = open(f"configs/{shape}.yaml").read()
    return int(re.search(rf"^\s+{key}: (\d+)", text, re.M).group(1))


def row(log):
    shape = re.search(r"scale_(\w+)\.log$", log).group(1)
    text = open(log).read()
    n = int(re.search(r"model llama: (\d+) parameters", text).group(1))
    steps = re.findall(r"step (\d+)/\d+ .*?\| (\d+) tokens/s \| step ([\d.]+) ms", text)
    peak = re.search(r"measured peak ([\d.]+ [GM]iB)", text)
    policy = re.search(r"activation checkpointing (\w+) chosen", text)
    L, d = config_int(shape, "n_layer"), config_int(shape, "hidden")
    tok_s, step_ms = int(steps[-1][1]), float(steps[-1][2])
    flops_per_token = 6 * n + 6 * L * d * T
    tflops = tok_s * flops_per_token / 1e12
    return dict(shape=shape, n=n, tok_s=tok_s, step_ms=step_ms, peak=peak.group(1) if peak else "?",
                policy=policy.group(1) if policy else "(config)", tflops=tflops, mfu=tflops / PEAK_TFLOPS)


def main():
    rows = sorted((row(log) for log in sys.argv[2:]), key=lambda r: r["n"])
    print("| shape | parameters | activation checkpointing | tokens/s | step | peak (allocator) | model TFLOP/s | MFU |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['shape']} | {r['n'] / 1e9:.2f}B | {r['policy']} | {r['tok_s']:,} | {r['step_ms']:.1f} ms | "
              f"{r['peak']} | {r['tflops']:.0f} | {100 * r['mfu']:.1f}% |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["n"] / 1e9 for r in rows]
    ax.plot(xs, [r["tflops"] for r in rows], "o-", label="dtrain, model TFLOP/s (6N + 6LdT per token)")
    for r, x in zip(rows, xs):
        ax.annotate(f"{r['tok_s']:,} tok/s\nMFU {100 * r['mfu']:.0f}%", (x, r["tflops"]), textcoords="offset points",
                    xytext=(4, -28), fontsize=8)
    ax.axhline(PEAK_TFLOPS, ls=":", c="gray", label="H200 dense bf16 peak (989)")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (billions, log scale)")
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(0, 1050)
    ax.set_title("Llama shapes on one H200, B x T = 4 x 2048: work per second vs size")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)


if __name__ == "__main__":
    main()
