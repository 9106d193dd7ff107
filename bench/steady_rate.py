#!/usr/bin/env python3
"""A run's samples/s over its whole training time and in its steady state.

    bench/steady_rate.py RUN_DIR [FROM_STEP]

Whole: summary.json's samples_per_s (samples over train_s). Steady: the
samples between the metrics.jsonl lines at FROM_STEP (default 50) and the
last step, over the wall-clock seconds between them; for a cluster, worker
0's lines. The first steps pay one-time costs (a GPU loads its kernels on
first use, oneDNN builds its primitives) that the steady figure leaves out.
The local trainer evaluates the untrained model before its first step, which
warms the forward pass's kernels outside train_s; a cluster's workers do
not. Standard library only.
"""
import json
import sys


def main():
    run = sys.argv[1]
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    s = json.load(open(run + "/summary.json"))
    lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    lines = [l for l in lines if l.get("worker", 0) == 0 and "samples" in l]
    a = next((l for l in lines if l["step"] == start), None)
    b = lines[-1] if lines else None
    out = "whole %8.0f samples/s" % s["samples_per_s"]
    if a is not None and b is not None and b["wall_s"] > a["wall_s"]:
        rate = (b["samples"] - a["samples"]) / (b["wall_s"] - a["wall_s"])
        out += "  steady %8.0f samples/s (steps %d-%d)" % (rate, start, b["step"])
    w = (s.get("workers") or [{}])[0]
    if "compute_s" in w:
        out += "  w0 compute %.3f comm %.3f" % (w["compute_s"], w["comm_s"])
    print(out)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a failed run: say why, keep the table going
        print("failed: %s" % e)
