#!/usr/bin/env python3
"""Compiles strata's sources (-fsyntax-only) against another LibTorch's headers.

    python3 scripts/check_torch_headers.py LIBTORCH_INCLUDE
        [--cuda CUDA_INCLUDE] [--build build] [--jobs 2] [FILTER...]

GPU machines come rarely and briefly, and Debian's LibTorch is 1.13 without
CUDA: this catches, on the CPU machine, code that would not compile against a
newer CUDA LibTorch (API changes, the CUDA-only src/models/cuda_graph.cc)
before a GPU session spends its minutes on it. LIBTORCH_INCLUDE is a
LibTorch's include/ directory (the one holding ATen/, c10/, torch/);
CUDA_INCLUDE the CUDA toolkit's headers (cuda_runtime_api.h), which the
CUDA-only file needs. It reads the compile commands of a configured build
(cmake -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; the build's generated headers,
such as the protobuf ones, must exist) and compiles every file of src/ and
tests/ (or those whose path holds a FILTER) with Debian's torch include
directories replaced by LIBTORCH_INCLUDE's, and STRATA_CUDA_GRAPHS defined
for cuda_graph.cc. Only ATen, c10, torch, caffe2 and kineto are taken from
LIBTORCH_INCLUDE (through links in a temporary directory): its bundled fmt,
protobuf and pybind11 would otherwise hide the packages' own. Prints one line
a file and the first errors of each failure; exits 1 if any failed. Standard
library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

TORCH_DIRS = ("ATen", "c10", "torch", "caffe2", "kineto")


def commands(build, root, filters, inc, cuda):
    """(file, command, directory) of each source to check."""
    out = []
    for e in json.load(open(os.path.join(build, "compile_commands.json"))):
        f = e["file"]
        rel = os.path.relpath(f, root)
        if not (rel.startswith("src/") or rel.startswith("tests/")):
            continue
        if filters and not any(x in rel for x in filters):
            continue
        cmd = e["command"]
        cmd = re.sub(r" -include \S+cmake_pch\.hxx", "", cmd)
        cmd = re.sub(r" -o \S+", " -o /dev/null", cmd)
        cmd = re.sub(r" -isystem /usr/include/torch/csrc/api/include",
                     f" -I{inc[0]} -I{inc[1]}" + (f" -I{cuda}" if cuda else ""),
                     cmd)
        cmd = cmd.replace(" -O3", " -O0") + " -fsyntax-only"
        if rel == "src/models/cuda_graph.cc":
            cmd += " -DSTRATA_CUDA_GRAPHS"
        out.append((rel, cmd, e["directory"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libtorch_include")
    ap.add_argument("--cuda", dest="cuda_include", default="")
    ap.add_argument("filters", nargs="*")
    ap.add_argument("--build", default="build")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_intermixed_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lt = os.path.abspath(a.libtorch_include)
    api = os.path.join(lt, "torch/csrc/api/include")
    if not os.path.isfile(os.path.join(api, "torch/torch.h")):
        sys.exit(f"check_torch_headers: {lt} is no LibTorch include/ "
                 "directory (no torch/csrc/api/include/torch/torch.h)")
    if a.cuda_include and not os.path.isfile(
            os.path.join(a.cuda_include, "cuda_runtime_api.h")):
        sys.exit(f"check_torch_headers: no cuda_runtime_api.h in "
                 f"{a.cuda_include}")
    if not os.path.isfile(os.path.join(a.build, "compile_commands.json")):
        sys.exit(f"check_torch_headers: no {a.build}/compile_commands.json "
                 "(configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)")
    with tempfile.TemporaryDirectory() as links:
        for d in TORCH_DIRS:
            if os.path.isdir(os.path.join(lt, d)):
                os.symlink(os.path.join(lt, d), os.path.join(links, d))
        todo = commands(a.build, root, a.filters, (links, api),
                        a.cuda_include)
        print(f"{len(todo)} files against {lt}", flush=True)

        def check(t):
            rel, cmd, d = t
            r = subprocess.run(cmd, shell=True, cwd=d, capture_output=True,
                               text=True)
            return rel, r.returncode, r.stderr

        failed = 0
        with ThreadPoolExecutor(a.jobs) as ex:
            for rel, rc, err in ex.map(check, todo):
                print(("ok     " if rc == 0 else "FAILED ") + rel, flush=True)
                if rc:
                    failed += 1
                    errors = [l for l in err.splitlines() if "error" in l]
                    print("\n".join(errors[:10]), flush=True)
    print(f"{len(todo) - failed} of {len(todo)} compiled")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
