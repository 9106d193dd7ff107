"""train.precision = bf16 against float32, side by side (issue: fast out of
the box; mixed precision).

usage: python3 bench/precision.py BUILD_DIR [--repeats N] [--epochs E]
                                  [--device cpu|cuda] [--resnet-steps S]
Needs STRATA_DATA_DIR (MNIST) for the LeNet rows.

1. LeNet on MNIST (examples/mnist_lenet.toml, E epochs), local trainer:
   final validation accuracy and samples/s in float32 and in bf16, one seed
   per repeat (run.seed), the two precisions alternating; the accuracy
   difference per seed and its median (target: within 0.3 points).
2. ResNet-56 on synthetic 3x32x32 images, batch 128, S steps: samples/s in
   float32 and bf16, alternating, medians.
Runs go through `strata train`; figures come from each run's summary.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(exe, args, root, name):
    subprocess.run([exe, "train"] + args + [
        "--set", f"run.dir={root}", "--set", f"run.name={name}",
        "--set", "metrics.tensorboard=false"], check=True,
        capture_output=True)
    with open(os.path.join(root, name, "summary.json")) as f:
        s = json.load(f)
    return s["final_val_acc"], s["samples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--resnet-steps", type=int, default=20)
    a = ap.parse_args()
    exe = os.path.join(a.build, "src", "cli", "strata")
    data = os.environ.get("STRATA_DATA_DIR")
    root = tempfile.mkdtemp(prefix="strata-precision-")
    here = os.path.dirname(os.path.abspath(__file__))
    dev = ["--set", f"train.device={a.device}"]
    print(f"device {a.device}; {os.cpu_count()} cores; {a.repeats} repeats, "
          "float32 and bf16 alternating\n")
    if data:
        lenet = ["-c", os.path.join(here, "..", "examples",
                                    "mnist_lenet.toml"),
                 "--set", f"data.dir={data}/mnist",
                 "--set", f"train.epochs={a.epochs}"] + dev
        print(f"LeNet, MNIST, {a.epochs} epoch(s), batch 64:\n")
        print("| seed | float32 acc | bf16 acc | bf16 - float32 (points) | "
              "float32 samples/s | bf16 samples/s |")
        print("| --- | --- | --- | --- | --- | --- |")
        diffs, rate = [], {"float32": [], "bf16": []}
        for i in range(a.repeats):
            seed = ["--set", f"run.seed={i + 1}"]
            got = {}
            order = ("float32", "bf16") if i % 2 == 0 else ("bf16",
                                                            "float32")
            for p in order:
                got[p] = run(exe, lenet + seed + [
                    "--set", f"train.precision={p}"], root, f"lenet-{p}-{i}")
                rate[p].append(got[p][1])
            d = 100 * (got["bf16"][0] - got["float32"][0])
            diffs.append(d)
            print(f"| {i + 1} | {got['float32'][0]:.4f} | "
                  f"{got['bf16'][0]:.4f} | {d:+.2f} | "
                  f"{got['float32'][1]:,.0f} | {got['bf16'][1]:,.0f} |",
                  flush=True)
        print(f"\nmedian difference {statistics.median(diffs):+.2f} points "
              f"(largest {max(diffs, key=abs):+.2f}); samples/s float32 "
              f"{statistics.median(rate['float32']):,.0f}, bf16 "
              f"{statistics.median(rate['bf16']):,.0f}\n")
    else:
        print("LeNet rows skipped: STRATA_DATA_DIR is not set\n")
    resnet = ["--set", "model.name=resnet56", "--set", "cluster.mode=local",
              "--set", "data.synthetic.shape=3x32x32",
              "--set", "data.synthetic.train_size=2560",
              "--set", "data.synthetic.val_size=256",
              "--set", "train.batch_size=128",
              "--set", f"train.iterations={a.resnet_steps}"] + dev
    rate = {"float32": [], "bf16": []}
    for i in range(a.repeats):
        order = ("float32", "bf16") if i % 2 == 0 else ("bf16", "float32")
        for p in order:
            rate[p].append(run(exe, resnet + [
                "--set", f"train.precision={p}"], root, f"r56-{p}-{i}")[1])
    f, b = (statistics.median(rate[p]) for p in ("float32", "bf16"))
    print(f"ResNet-56, synthetic 3x32x32, batch 128, {a.resnet_steps} steps, "
          f"samples/s: float32 {f:,.0f}, bf16 {b:,.0f}, bf16 / float32 "
          f"{b / f:.2f} (runs: float32 "
          + ", ".join(f"{x:,.0f}" for x in rate["float32"]) + "; bf16 "
          + ", ".join(f"{x:,.0f}" for x in rate["bf16"]) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
