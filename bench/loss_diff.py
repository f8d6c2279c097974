"""Loss agreement of training runs, from the "train" records of their metrics.jsonl (train.log_every=1).

usage: python3 bench/loss_diff.py LAST_N REF_RUN_DIR OTHER_RUN_DIR...

For each other run: the mean |loss - ref loss| over the last LAST_N steps both runs logged, and both runs' mean
loss there. Used by bench/device_session.sh's gpt2fp8 stage: fp8 vs bf16, and a second bf16 seed vs bf16 (the
spread that fp8's difference is measured against, issue 35).
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
    last_n, ref_dir, others = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    ref = losses(ref_dir)
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


if __name__ == "__main__":
    main()
