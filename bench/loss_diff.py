"""Loss agreement of training runs, from the "train" records of their metrics.jsonl (train.log_every=1).

usage: python3 bench/loss_diff.py LAST_N REF_RUN_DIR OTHER_RUN_DIR... [--png OUT.png] [--summary]

For each other run: the mean |loss - ref loss| over the last LAST_N steps both runs logged, and both runs' mean
loss there. Used by bench/device_session.sh's gpt2fp8 stage: fp8 vs bf16, and a second bf16 seed vs bf16 (the
spread that fp8's difference is measured against, issue 35). With --png: every run's curve, and each other run's
|loss - ref loss| (smoothed over 50 steps) below. With --summary: the reference run's course (the divergence check of
a long run): its mean loss per tenth of the run, the largest loss after the first tenth, the largest rise of the loss
over the mean of the 100 steps before it, the largest gradient norm, and whether any loss is not finite.
"""
import json
import math
import sys


def losses(run_dir, key="loss"):
    out = {}
    for line in open(f"{run_dir}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("kind") == "train" and key in r:
            out[r["step"]] = r[key]
    return out


def summary(run_dir):
    loss = losses(run_dir)
    steps = sorted(loss)
    if not steps:
        raise SystemExit(f"{run_dir}: no train records")
    tenth = max(1, len(steps) // 10)
    means = [sum(loss[s] for s in steps[i:i + tenth]) / len(steps[i:i + tenth]) for i in range(0, len(steps), tenth)]
    later = steps[tenth:] or steps
    worst = max(later, key=lambda s: loss[s])
    rise, rise_at = 0.0, steps[0]
    for i in range(100, len(steps)):
        before = sum(loss[s] for s in steps[i - 100:i]) / 100
        if loss[steps[i]] - before > rise:
            rise, rise_at = loss[steps[i]] - before, steps[i]
    gnorm = losses(run_dir, "grad_norm")
    finite = all(math.isfinite(v) for v in loss.values())
    print(f"{run_dir}: steps {steps[0]}-{steps[-1]} ({len(steps)}), all losses finite: {finite}")
    print("  mean loss per tenth: " + " ".join(f"{m:.4f}" for m in means))
    print(f"  largest loss after step {steps[tenth - 1]}: {loss[worst]:.4f} at step {worst}; last {loss[steps[-1]]:.4f}")
    print(f"  largest rise over the previous 100 steps' mean: {rise:.4f} at step {rise_at}")
    if gnorm:
        g = max(gnorm, key=lambda s: gnorm[s])
        print(f"  largest gradient norm: {gnorm[g]:.4f} at step {g}")


def main():
    args = sys.argv[1:]
    png = None
    if "--png" in args:
        i = args.index("--png")
        png = args[i + 1]
        del args[i:i + 2]
    show_summary = "--summary" in args
    if show_summary:
        args.remove("--summary")
    last_n, ref_dir, others = int(args[0]), args[1], args[2:]
    ref = losses(ref_dir)
    if show_summary:
        summary(ref_dir)
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
    if not others:  # one run alone: its curve only
        fig, ax = plt.subplots(figsize=(8, 5))
        steps = sorted(ref)
        ax.plot(steps, [ref[s] for s in steps], lw=0.8, label=ref_dir.rstrip("/").split("/")[-1])
        ax.set_ylabel("training loss")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.legend()
        fig.tight_layout()
        fig.savefig(png, dpi=120)
        return
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
