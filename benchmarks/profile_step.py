#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel.

Runs a program (by default bench_train: two warm-up steps, then one timed llmtrain step of GPT-2 124M at
B=16, the only one profiled: bench_train opens the profiler's range around its timed steps)
under Nsight Compute with only the duration metric, then prints each kernel's total time over the
profiled launches, its launch count and its share, largest first. ncu runs the kernels one at a time (caches
left warm, clocks left alone), so the total is the sum of kernel times with no overlap or launch gaps:
the step's floor on this path; the step's measured time less this total is host and launch overhead.

  python3 benchmarks/profile_step.py [--ncu PATH] [--csv FILE] [-- PROGRAM ARGS...]
"""
import argparse
import collections
import csv
import io
import os
import shutil
import subprocess
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    ap.add_argument("--csv", help="also write the raw per-launch CSV here")
    ap.add_argument("--top", type=int, default=40, help="rows of the table")
    ap.add_argument("program", nargs="*")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    program = a.program or [os.path.join(root, "build/bin/bench_train"), "--batch", "16", "--steps", "1",
                            "--warmup", "2", "--path", "llmtrain"]
    cmd = [a.ncu, "--profile-from-start", "off", "--clock-control", "none", "--cache-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
           "--print-units", "base"] + program
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-4000:])
        return run.returncode
    lines = run.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.stderr.write("profile_step: no kernel rows in ncu's output\n" + run.stdout[-4000:])
        return 1
    text = "\n".join(lines[start:])
    if a.csv:
        with open(a.csv, "w") as f:
            f.write(text + "\n")
    total = collections.Counter()
    count = collections.Counter()
    rows = list(csv.DictReader(io.StringIO(text)))
    for r in rows:
        try:
            ns = float(r["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue  # the units row
        name = r["Kernel Name"]
        total[name] += ns
        count[name] += 1
    grand = sum(total.values())
    print(f"{len(rows)} launches, {grand / 1e6:.3f} ms of kernel time in all")
    print(f"{'ms':>9} {'share':>6} {'launches':>8}  kernel")
    for name, ns in total.most_common(a.top):
        print(f"{ns / 1e6:9.3f} {100 * ns / grand:5.1f}% {count[name]:8d}  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
