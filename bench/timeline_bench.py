"""The cost of cluster.timeline: the same runs with it off and on, side by side.

usage: python3 bench/timeline_bench.py BUILD_DIR [--pairs N]
Needs STRATA_DATA_DIR (MNIST). Each pair runs the configuration with the
timeline off and on, in alternating order (off-on, on-off, ...), so drift in
the machine's load falls on both alike. Figures: the median over pairs of
training samples/s on / off (the target: above 0.98, i.e. under 2%
overhead), and of the wall-time cost of gathering and writing timeline.json
at the end (wall_s - train_s - setup_s, on minus off). Beside them, the
recording's own cost, which the noise of a 2-core machine hides in the
ratio: build/bench/timeline_span_bench's ns per span (a request's span, the
dearest kind) times the run's spans, over its training seconds: an upper
bound on the share of one core's time that recording took.

Rows:
  sync-mlp    sync, 2 workers + 1 server, MNIST mlp, 400 steps (short steps,
              many spans per second: the worst case for a recorder)
  async-lenet async, 2 workers + 1 server, MNIST LeNet, 600 steps
  allreduce   allreduce, 2 workers, MNIST mlp, 400 steps
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from mnist_run import train

ROWS = {
    "sync-mlp": ("examples/mnist_mlp.toml",
                 ["cluster.mode=sync", "cluster.workers=2",
                  "cluster.servers=1", "train.iterations=400"]),
    "async-lenet": ("examples/mnist_lenet.toml",
                    ["cluster.mode=async", "cluster.workers=2",
                     "cluster.servers=1", "train.iterations=600"]),
    "allreduce": ("examples/mnist_mlp.toml",
                  ["cluster.mode=allreduce", "cluster.workers=2",
                   "train.iterations=400"]),
}


def run(exe, config, sets, root, name):
    s = train(exe, sets, root, name, config)
    spans = 0
    path = os.path.join(root, name, "timeline.json")
    if os.path.exists(path):
        with open(path) as f:
            spans = sum(c["spans"] for c in json.load(f)["otherData"]["clocks"].values())
    return s, spans


def span_ns(build):
    out = subprocess.run([os.path.join(build, "bench", "timeline_span_bench"),
                          "--benchmark_format=json"], check=True,
                         capture_output=True, text=True).stdout
    rows = {b["name"]: b["real_time"] for b in json.loads(out)["benchmarks"]}
    return rows["BM_SpanOff"], rows["BM_SpanOn"], rows["BM_RequestSpanOn"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--pairs", type=int, default=7)
    a = ap.parse_args()
    exe = os.path.join(a.build, "src", "cli", "strata")
    print(f"timeline_bench: {a.pairs} pairs per row, alternating order; "
          "samples/s from each run's summary (training only)")
    off_ns, on_ns, request_ns = span_ns(a.build)
    print(f"one span: off {off_ns:.2f} ns, on {on_ns:.1f} ns, a request's "
          f"{request_ns:.1f} ns (timeline_span_bench)")
    with tempfile.TemporaryDirectory() as root:
        for row, (config, sets) in ROWS.items():
            ratios, extra_wall, rates, spans = [], [], {"off": [], "on": []}, 0
            bound = []
            for p in range(a.pairs):
                got = {}
                order = ["off", "on"] if p % 2 == 0 else ["on", "off"]
                for which in order:
                    s, n = run(exe, config,
                                 sets + [f"cluster.timeline={'true' if which == 'on' else 'false'}"],
                                 root, f"{row}-{p}-{which}")
                    got[which] = s
                    rates[which].append(s["samples_per_s"])
                    if which == "on":
                        spans = n
                        bound.append(n * request_ns * 1e-9 / s["train_s"])
                ratios.append(got["on"]["samples_per_s"] / got["off"]["samples_per_s"])
                end = {k: v["wall_s"] - v["train_s"] - v["setup_s"] for k, v in got.items()}
                extra_wall.append(end["on"] - end["off"])
            print(f"{row:12s} samples/s off {statistics.median(rates['off']):9.0f}  "
                  f"on {statistics.median(rates['on']):9.0f}  "
                  f"on/off median {statistics.median(ratios):.3f} "
                  f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)}); "
                  f"{spans} spans; recording <= {100 * statistics.median(bound):.2f}% "
                  f"of one core; gather+write {statistics.median(extra_wall):.3f} s")


if __name__ == "__main__":
    main()
