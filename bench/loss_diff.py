"""Loss agreement of training runs, from the "train" records of their metrics.jsonl (train.log_every=1).

usage: python3 bench/loss_diff.py LAST_N REF_RUN_DIR OTHER_RUN_DIR... [--png OUT.png]

For each other run: the mean |loss - ref loss| over the last LAST_N steps both runs logged, and both runs' mean
loss there. Used by bench/device_session.sh's gpt2fp8 stage: fp8 vs bf16, and a second bf16 seed vs bf16 (the
spread that fp8's difference is measured against, issue 35). With --png: every run's curve, and each other run's
|loss - ref loss| (smoothed over 50 steps) below.
"""
import json
import sys


def losses(run_dir):
    out = {}
    for line in open(f"{run_dir}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("kind") == "train" and "loss" in r:
            out[r["step"]] = r["loss"]
    return out


def main():
    args = sys.argv[1:]
    png = None
    if "--png" in args:
        i = args.index("--png")
        png = args[i + 1]
        del args[i:i + 2]
    last_n, ref_dir, others = int(args[0]), args[1], args[2:]
    ref = losses(ref_dir)
    if png:
        plot(png, ref_dir, ref, others)
    for other in others:
        o = losses(other)
        steps = sorted(set(ref) & set(o))[-last_n:]
        if not steps:
            raise SystemExit(f"{other}: no step in common with {ref_dir}")
        diff = sum(abs(o[s] - ref[s]) for s in steps) / len(steps)
        mean_ref = sum(ref[s] for s in steps) / len(steps)
        mean_o = sum(o[s] for s in steps) / len(steps)
        print(f"{other} vs {ref_dir}: steps {steps[0]}-{steps[-1]} ({len(steps)}): mean |dloss| {diff:.4f}; "
              f"mean loss {mean_o:.4f} vs {mean_ref:.4f}")


def plot(png, ref_dir, ref, others):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    steps = sorted(ref)
    ax.plot(steps, [ref[s] for s in steps], lw=0.8, label=ref_dir.rstrip("/").split("/")[-1])
    for other in others:
        o = losses(other)
        common = sorted(set(ref) & set(o))
        name = other.rstrip("/").split("/")[-1]
        (line,) = ax.plot(common, [o[s] for s in common], lw=0.8, label=name)
        d = [abs(o[s] - ref[s]) for s in common]
        smooth = [sum(d[max(0, i - 49):i + 1]) / len(d[max(0, i - 49):i + 1]) for i in range(len(d))]
        ax2.plot(common, smooth, lw=0.8, label=name, color=line.get_color())  # the run's colour above
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.legend()
    ax2.set_ylabel("|dloss| vs " + ref_dir.rstrip("/").split("/")[-1] + "\n(mean of 50 steps)")
    ax2.set_xlabel("step")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
