"""Sums an Nsight Compute CSV (`ncu --csv --page raw --metrics gpu__time_duration.sum ...`) by kernel name.

usage: python3 bench/kernel_profile.py NCU.csv [STEPS]
Prints one line per kernel: launches, total ms (divided by STEPS when given: per step), share of the total.
"""
import collections, csv, sys


def main():
    rows = list(csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')))
    steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    total, count = collections.Counter(), collections.Counter()
    for r in rows:
        v = r.get("gpu__time_duration.sum", "")
        try:
            ns = float(v.replace(",", ""))
        except ValueError:
            continue  # the units row
        name = r["Kernel Name"][:110]
        total[name] += ns
        count[name] += 1
    all_ns = sum(total.values())
    print(f"{len(rows)} kernel launches, {all_ns / 1e6 / steps:.2f} ms per step of kernel time")
    for name, ns in total.most_common(40):
        print(f"{count[name] / steps:7.1f} x {ns / 1e6 / steps:8.3f} ms {100 * ns / all_ns:5.1f}%  {name}")


if __name__ == "__main__":
    main()
