#!/usr/bin/python3
"""PyTorch DDP (gloo, CPU) reference run for bench/ddp_bench.sh.

Trains the problem that `strata train -c examples/mnist_mlp.toml --processes
--set cluster.mode=allreduce --set cluster.workers=W` trains, with W processes
of torch.nn.parallel.DistributedDataParallel, and prints one JSON line:

  {"samples_per_s": ..., "final_val_acc": ..., "steps": ..., "train_s": ...,
   "samples": ..., "world_size": ..., "worker_batch": ...}

Run it with Debian's python3-torch: /usr/bin/python3 bench/ddp_compare.py
--data-dir DIR/mnist [--steps 600 --batch 128 ...]. Standard library + torch.

What is the same as strata (src/worker/*, src/exchange/*, src/data/*, src/ps/*):
  - model: Linear(784, hidden) -> ReLU -> Linear(hidden, 10) (models.cc MlpImpl),
    cross-entropy loss; PyTorch's default Linear initialisation (LibTorch's
    too), rank 0's initial weights broadcast to every rank (DDP does this;
    strata's allreduce broadcasts worker 0's model).
  - data: MNIST train-* (60k) for training, the official t10k-* (10k) set as
    the validation set (readers.cc LoadMnistFamily; data.val_fraction is not
    used for MNIST); pixels / 255 then (x - 0.1307) / 0.3081 (transforms.cc).
  - sharding: rank r holds examples r, r+W, r+2W, ... (strata's default
    data.sharding.method = "mod"); each epoch a fresh permutation of the shard,
    taken in consecutive batches of B/W, the last batch of an epoch partial
    (data.sampler = "shuffle", sampler.cc EpochShuffler).
  - optimizer: SGD with momentum (dampening 0, buffer starts at the first
    gradient, ps/optimizer.cc), weight decay, on the gradient averaged over the
    W ranks; per-step rate from the same schedule formula as ps/schedule.cc
    (constant / cosine / step, linear warm-up).
  - each step also computes loss.item() and the batch accuracy, like strata's
    ForwardBackward (train/batch.cc).
  - threads: torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1 /
    OMP_NUM_THREADS=1 per process (strata: cluster.threads_per_worker = 1,
    OPENBLAS_NUM_THREADS=1).

What differs:
  - timing. strata's train_s (roles.cc RunCoordinatorRole) runs from the
    coordinator's barrier 0 (every worker started, loaded MNIST, joined the
    cluster, connected the collective group and received the initial model)
    until every worker has reported done; its setup_s is the time before.
    Here train_s is the training loop: from a barrier after data loading,
    model construction and the DDP wrapper (its initial broadcast) until the
    last step of the slowest rank (per-rank loop time, maximum over ranks).
    strata's figure also holds reporting done to the coordinator (a few ms);
    bench/ddp_bench.sh prints strata's loop-only rate (samples / max over
    workers of compute_s + comm_s) beside it.
  - gradient exchange: DDP all-reduces its buckets (25 MiB default; the whole
    0.8 MB model is one bucket) with gloo, overlapped with the backward pass;
    strata all-reduces its own 1 MiB buckets (here also one bucket) with
    Gloo through its own collective layer, also overlapped with the backward
    pass (cluster.bucket_overlap).
  - random numbers: torch's generator here, strata's mt19937_64 there, so
    the initial weights and the data order differ (same distributions).
  - evaluation: rank 0 evaluates the final model on the 10k set in batches of
    1000 (train.eval_batch_size); strata's separate evaluator process does it.
    Neither is inside train_s.
"""

import argparse
import gzip
import json
import math
import os
import socket
import struct
import subprocess
import sys
import time


def read_idx(path, magic):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        raise ValueError(f"{path}: magic {got:#x}, expected {magic:#x}")
    count = struct.unpack(">I", data[4:8])[0]
    if magic == 0x803:
        rows, cols = struct.unpack(">II", data[8:16])
        return count, rows * cols, data[16:]
    return count, 1, data[8:]


def find(dir_, base):
    for name in (base, base + ".gz"):
        p = os.path.join(dir_, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{base}[.gz] not found in {dir_}")


def load_split(torch, dir_, prefix):
    n, size, px = read_idx(find(dir_, f"{prefix}-images-idx3-ubyte"), 0x803)
    m, _, lb = read_idx(find(dir_, f"{prefix}-labels-idx1-ubyte"), 0x801)
    if n != m:
        raise ValueError(f"{prefix}: {n} images but {m} labels")
    x = torch.frombuffer(bytearray(px), dtype=torch.uint8).reshape(n, size)
    x = x.to(torch.float32) / 255.0
    x = (x - 0.1307) / 0.3081  # transforms.cc: MNIST's published mean / std
    y = torch.frombuffer(bytearray(lb), dtype=torch.uint8).to(torch.int64)
    return x.contiguous(), y


def rate(a, step):
    """ps/schedule.cc LrSchedule::Rate."""
    if a.warmup_steps > 0 and step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if a.schedule == "cosine":
        span = max(1, a.steps - a.warmup_steps)
        t = min(1.0, (step - a.warmup_steps) / span)
        return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * t))
    if a.schedule == "step":
        return a.lr * a.step_gamma ** ((step - a.warmup_steps) // a.step_every)
    return a.lr


def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank, world = a.rank, a.world_size
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=rank, world_size=world,
                            timeout=__import__("datetime").timedelta(
                                seconds=a.timeout))
    torch.manual_seed(a.seed)  # the same initial model on every rank anyway
    x_train, y_train = load_split(torch, a.data_dir, "train")
    shard = torch.arange(rank, x_train.size(0), world)  # "mod" sharding
    xs = x_train[shard].contiguous()
    ys = y_train[shard].contiguous()
    del x_train, y_train
    model = nn.Sequential(nn.Linear(xs.size(1), a.hidden), nn.ReLU(),
                          nn.Linear(a.hidden, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay, nesterov=a.nesterov)
    wb = a.batch // world
    if wb < 1:
        raise SystemExit(f"batch {a.batch} cannot be split over {world} ranks")
    gen = torch.Generator()
    gen.manual_seed(a.seed * 1000003 + rank)
    n = xs.size(0)
    order = torch.randperm(n, generator=gen)
    pos = 0
    samples = 0
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(a.steps):
        k = min(wb, n - pos)
        idx = order[pos:pos + k]
        pos += k
        if pos == n:
            order = torch.randperm(n, generator=gen)
            pos = 0
        xb = xs.index_select(0, idx)
        yb = ys.index_select(0, idx)
        for g in opt.param_groups:
            g["lr"] = rate(a, step)
        opt.zero_grad(set_to_none=False)
        logits = ddp(xb)
        loss = F.cross_entropy(logits, yb)
        loss.backward()  # DDP averages the gradients over the ranks
        loss.item()
        with torch.no_grad():
            (logits.argmax(1) == yb).sum().item()
        opt.step()
        samples += k
    loop_s = time.perf_counter() - t0
    stats = torch.tensor([loop_s, float(samples)], dtype=torch.float64)
    t_max = stats[:1].clone()
    dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
    total = stats[1:].clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if rank == 0:
        x_val, y_val = load_split(torch, a.data_dir, "t10k")
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, x_val.size(0), a.eval_batch):
                out = model(x_val[i:i + a.eval_batch])
                correct += int((out.argmax(1) == y_val[i:i + a.eval_batch]).sum())
        train_s = float(t_max[0])
        print(json.dumps({
            "samples_per_s": float(total[0]) / train_s if train_s > 0 else 0.0,
            "final_val_acc": correct / x_val.size(0),
            "steps": a.steps,
            "train_s": train_s,
            "samples": int(total[0]),
            "world_size": world,
            "worker_batch": wb,
            "torch": torch.__version__,
        }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a, argv):
    port = free_port()
    env = dict(os.environ)
    # Before the interpreter starts, so OpenBLAS / OpenMP read them.
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = []
    for r in range(a.world_size):
        cmd = [sys.executable, os.path.abspath(__file__), *argv,
               "--rank", str(r), "--port", str(port)]
        procs.append(subprocess.Popen(cmd, env=env))
    deadline = time.monotonic() + a.timeout
    rc = 0
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"ddp_compare: rank process {p.pid} still running after "
                  f"{a.timeout} s: terminating", file=sys.stderr)
            for q in procs:
                if q.poll() is None:
                    q.kill()
                    q.wait()
            return 124
        rc = rc or p.returncode
    return rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True,
                   help="directory with the MNIST IDX files (possibly .gz)")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--batch", type=int, default=128, help="global batch B")
    p.add_argument("--steps", type=int, default=600, help="steps per process")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--schedule", default="cosine",
                   choices=["constant", "cosine", "step"])
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--step-every", type=int, default=1000)
    p.add_argument("--step-gamma", type=float, default=0.1)
    p.add_argument("--eval-batch", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds before the ranks are ended")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank < 0:
        sys.exit(launch(a, sys.argv[1:]))
    worker(a)


if __name__ == "__main__":
    main()
