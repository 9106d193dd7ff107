#!/usr/bin/env python3
"""Where two profiled runs differ, per step (train.profile_steps).

    bench/profile_diff.py A/profile-local.json B/profile-worker0.json [--top N]

Joins the two tables on (operator, device, thread role) and prints each
row's microseconds per step in A and in B, the largest differences first.
The thread role is "step" for the thread that ran strata::step (the trainer
or the worker), "other" for LibTorch's own threads (autograd's device
threads, Kineto's GPU rows). Times are inclusive: a scope holds what it
called. Standard library only.
"""
import argparse
import json
from collections import defaultdict


def load(path):
    with open(path) as f:
        j = json.load(f)
    step_threads = {o["thread"] for o in j["ops"] if o["name"] == "strata::step"}
    rows = defaultdict(lambda: [0.0, 0.0])  # key -> [us/step, calls/step]
    n = max(1, j["steps"])
    for o in j["ops"]:
        role = "step" if o["thread"] in step_threads else "other"
        r = rows[(o["name"], o["device"], role)]
        r[0] += o["per_step_us"]
        r[1] += o["calls"] / n
    return j, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    ja, a = load(args.a)
    jb, b = load(args.b)
    print("A = %s (%s, %d steps), B = %s (%s, %d steps)" % (
        args.a, ja["who"], ja["steps"], args.b, jb["who"], jb["steps"]))
    keys = set(a) | set(b)
    diff = sorted(keys, key=lambda k: -abs(b.get(k, [0, 0])[0] - a.get(k, [0, 0])[0]))
    print("%-58s %-5s %-5s %10s %10s %10s %7s %7s" % (
        "operator", "dev", "thr", "A us", "B us", "B-A us", "A n", "B n"))
    for k in diff[:args.top]:
        ra, rb = a.get(k, [0, 0]), b.get(k, [0, 0])
        print("%-58s %-5s %-5s %10.1f %10.1f %+10.1f %7.1f %7.1f" % (
            k[0][:58], k[1][:5], k[2], ra[0], rb[0], rb[0] - ra[0], ra[1], rb[1]))


if __name__ == "__main__":
    main()
