#!/usr/bin/env python3
"""The figures of bench/gpu_session.sh's table, against the issue's targets.

    python3 bench/gpu_table.py TABLE_OUTPUT

Reads what the table part of bench/gpu_session.sh printed (its rows and the
plain PyTorch peer's lines) and prints, per model, each strata row's samples/s
(steady state from step 50 where the run had one, else the whole run, marked
*), as the whole cluster's: a cluster's steady figure is worker 0's, so a
row of n workers counts n times it (the whole run's is the cluster's). Beside it the ratio to strata's local
trainer and to the peer's eager step (the issue's targets: 1 + 1 >= 0.95x
local in process, >= 0.9x over TCP; 2 and 4 workers sharing the GPU >= 0.9x
local; the local trainer with train.cuda_graph >= 2x eager PyTorch).
"""
import re
import sys

ROW = re.compile(r"^(?P<name>[a-z0-9]+(?:-[a-z0-9]+)+): whole +(?P<whole>[0-9.]+) "
                 r"samples/s(?:  steady +(?P<steady>[0-9.]+))?")
FAILED = re.compile(r"^(?P<name>[a-z0-9]+(?:-[a-z0-9]+)+): (?P<why>failed|skipped)")
PEER = re.compile(r"^peer (?P<model>\S+) \S+ (?P<mode>\S+) +batch \d+: whole +"
                  r"(?P<whole>[0-9.]+) samples/s  steady\(50\+\) +(?P<steady>\S+)")


def workers(rest):
    """Workers of a row from its name: allreduce4 -> 4; local, sync11 -> 1."""
    m = re.match(r"(?:allreduce|sync|async)(\d+)$", rest.split("-")[0])
    if not m or m.group(1) == "11":
        return 1
    return int(m.group(1))


def figure(whole, steady):
    if steady is not None and steady not in ("nan", ""):
        return float(steady), ""
    return float(whole), "*"


def main():
    rows, peers, order = {}, {}, []
    for line in open(sys.argv[1]):
        line = line.strip()
        p = PEER.match(line)
        if p:
            peers.setdefault(p["model"], {})[p["mode"]] = figure(
                p["whole"], p["steady"])[0]
            continue
        f = FAILED.match(line)
        if f:
            model, rest = f["name"].split("-", 1)
            rows.setdefault(model, []).append((rest, None, f["why"]))
            if model not in order:
                order.append(model)
            continue
        r = ROW.match(line)
        if r:
            model, rest = r["name"].split("-", 1)
            rate, mark = figure(r["whole"], r["steady"])
            # The steady figure is worker 0's; the whole run's, the cluster's.
            if not mark:
                rate *= workers(rest)
            rows.setdefault(model, []).append((rest, rate, mark))
            if model not in order:
                order.append(model)
    for model in order:
        local = next((v for n, v, _ in rows[model] if n == "local" and v),
                     None)
        eager = peers.get(model, {}).get("eager")
        print(f"{model}: samples/s (cluster total), x local, x eager PyTorch"
              + (f" ({eager:.0f})" if eager else ""))
        for rest, rate, mark in rows[model]:
            if rate is None:
                print(f"  {rest:22s}    {mark} (its line above says why)")
                continue
            x_local = f"{rate / local:5.2f}x" if local else "  -  "
            x_eager = f"{rate / eager:5.2f}x" if eager else "  -  "
            print(f"  {rest:22s} {rate:9.0f}{mark:1s}  {x_local}  {x_eager}")
        for mode, rate in sorted(peers.get(model, {}).items()):
            x_local = f"{rate / local:5.2f}x" if local else "  -  "
            print(f"  {'peer ' + mode:22s} {rate:9.0f}   {x_local}")


if __name__ == "__main__":
    main()
