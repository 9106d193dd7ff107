#!/usr/bin/env python3
"""Plain PyTorch, the peer of strata's GPU table (issue: a cluster worker as
fast as the local trainer and a step faster than eager PyTorch).

    python3 bench/torch_peer.py [--device cuda] [--model resnet20|lenet]
                                [--batch 128] [--steps 400] [--modes ...]

The same network as strata's (ResNet-(6n+2) for CIFAR with the
parameter-free option-A shortcut, or LeNet-5 on 1x28x28), on synthetic
inputs, SGD with momentum 0.9, the loss and the accuracy read back every
step as strata's trainer does. Modes:
  eager      defaults;
  benchmark  torch.backends.cudnn.benchmark = True;
  bf16       autocast to bfloat16 (strata's train.precision = "bf16");
  graph      the whole step (forward, backward, optimizer step) captured
             once in a CUDA graph and replayed (PyTorch's documented
             whole-network capture; CUDA only).
Prints, per mode, samples/s over the whole run and from step 50 on (the
"steady" figure bench/steady_rate.py gives for strata's runs).
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.pad, self.stride = cout - cin, stride

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        s = x
        if self.stride != 1 or self.pad:
            s = x[:, :, ::self.stride, ::self.stride]
            s = F.pad(s, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(y + s)


class ResNet(nn.Module):
    def __init__(self, n, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks, c = [], 16
        for stage, w in enumerate((16, 32, 64)):
            for b in range(n):
                blocks.append(Block(c, w, 2 if stage > 0 and b == 0 else 1))
                c = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class LeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.f1, self.f2 = nn.Linear(16 * 5 * 5, 120), nn.Linear(120, 84)
        self.f3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2).flatten(1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


def make(model, device):
    if model == "lenet":
        return LeNet().to(device), (1, 28, 28)
    n = {"resnet20": 3, "resnet32": 5, "resnet56": 9}[model]
    return ResNet(n).to(device), (3, 32, 32)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(mode, a, device):
    torch.manual_seed(1)
    torch.backends.cudnn.benchmark = mode in ("benchmark", "graph")
    net, shape = make(a.model, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    xs = torch.randn(8, a.batch, *shape, device=device)
    ys = torch.randint(0, 10, (8, a.batch), device=device)
    amp = mode == "bf16"

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        with torch.autocast(device.type, torch.bfloat16, enabled=amp):
            out = net(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        return loss.detach(), (out.argmax(1) == y).sum()

    if mode == "graph":
        sx, sy = xs[0].clone(), ys[0].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):  # warm-up before capture, on a side stream
                step(sx, sy)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            sl, sc = step(sx, sy)

        def one(i):
            sx.copy_(xs[i % 8])
            sy.copy_(ys[i % 8])
            g.replay()
            return torch.stack([sl, sc.float()]).cpu()
    else:
        def one(i):
            loss, correct = step(xs[i % 8], ys[i % 8])
            return torch.stack([loss, correct.float()]).cpu()

    sync(device)
    t0 = time.perf_counter()
    t50 = None
    for i in range(a.steps):
        if i == 50:
            t50 = time.perf_counter()
        one(i)  # the loss and accuracy read back, every step
    sync(device)
    t1 = time.perf_counter()
    whole = a.steps * a.batch / (t1 - t0)
    steady = (a.steps - 50) * a.batch / (t1 - t50) if t50 else float("nan")
    print(f"peer {a.model} {device.type} {mode:9s} batch {a.batch}: whole "
          f"{whole:9.0f} samples/s  steady(50+) {steady:9.0f} samples/s",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available()
                    else "cpu")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--modes", nargs="+",
                    default=["eager", "benchmark", "bf16", "graph"])
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    print(f"peer: torch {torch.__version__}, "
          + (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"CPU, {torch.get_num_threads()} threads"), flush=True)
    for mode in a.modes:
        if mode == "graph" and device.type != "cuda":
            print("peer graph: skipped (CUDA graphs need a GPU)")
            continue
        run(mode, a, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
