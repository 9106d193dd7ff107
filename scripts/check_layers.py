#!/usr/bin/env python3
"""Checks strata's layering (docs/design/architecture.md, Module map).

1. Modules: every #include "module/..." in src/ goes from a module to one of
   a lower layer (the LAYERS table below): no arrow up, none sideways, and so
   no cycle between modules.
2. Files: the include graph between the files of src/ has no cycle.
3. LibTorch: no file of a LibTorch-free module includes LibTorch (torch/,
   ATen/, c10/, caffe2/), directly or through another file of src/. With a
   built Ninja build directory, also what the compiler itself read: for each
   object of a LibTorch-free library, `ninja -t deps` (the depfiles) must
   name no LibTorch header.

usage: scripts/check_layers.py [--build BUILD_DIR] [--graph]
  --graph  also print the module graph (one "a -> b, c" line per module)
exit 0 when all holds, 1 with one line per violation otherwise.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

# Layers, lowest first; a module may include modules of lower layers only.
LAYERS = [
    ["common"],
    ["transport", "data", "metrics", "models"],
    ["ps", "collective", "sharding", "experiment"],
    ["cluster"],
    ["run"],
    ["exchange", "coordinator", "server", "dataservice"],
    ["worker"],
    ["launch"],
    ["cli", "python"],
]
# The modules where a model computes; every other one (and strata_http,
# a library of src/metrics) must never see LibTorch (src/CMakeLists.txt).
TORCH_MODULES = {"models", "worker", "launch", "cli", "python"}
TORCH_FREE = {m for ms in LAYERS for m in ms} - TORCH_MODULES | {"http"}
TORCH = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10|caffe2)/', re.M)
LOCAL = re.compile(r'^\s*#\s*include\s*"([a-z_]+/[^"]+)"', re.M)


def layer_of():
    return {m: i for i, ms in enumerate(LAYERS) for m in ms}


def read_sources(root):
    files = {}
    for dp, _, fns in os.walk(os.path.join(root, "src")):
        for fn in fns:
            if fn.endswith((".h", ".cc")):
                p = os.path.join(dp, fn)
                rel = os.path.relpath(p, os.path.join(root, "src"))
                with open(p, encoding="utf-8", errors="replace") as f:
                    files[rel] = f.read()
    return files


def check_modules(files, out):
    layer = layer_of()
    graph = collections.defaultdict(set)
    for rel, text in files.items():
        m = rel.split("/")[0]
        if m not in layer:
            out.append(f"src/{rel}: module '{m}' is in no layer (LAYERS)")
            continue
        for inc in LOCAL.findall(text):
            dep = inc.split("/")[0]
            if dep == m or not os.path.isdir(f"src/{dep}"):
                continue
            graph[m].add(dep)
            if dep not in layer or layer[dep] >= layer[m]:
                out.append(f"src/{rel}: includes {inc}: module {m} (layer "
                           f"{layer[m]}) may not include {dep} (layer "
                           f"{layer.get(dep, '?')})")
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def check_files(files, out):
    graph = {rel: {i for i in LOCAL.findall(text) if i in files}
             for rel, text in files.items()}
    for comp in cycles(graph):
        out.append("file-level include cycle: " + " -> ".join(comp))
    return graph


def check_torch_sources(files, graph, out):
    reaches = {}

    def torch_path(rel, seen):
        if rel in reaches:
            return reaches[rel]
        if rel in seen:
            return None
        seen.add(rel)
        if TORCH.search(files[rel]):
            reaches[rel] = [rel]
            return reaches[rel]
        for dep in sorted(graph[rel]):
            p = torch_path(dep, seen)
            if p:
                reaches[rel] = [rel] + p
                return reaches[rel]
        reaches[rel] = None
        return None

    for rel in sorted(files):
        if rel.split("/")[0] in TORCH_FREE:
            p = torch_path(rel, set())
            if p:
                out.append(f"src/{rel}: LibTorch in a LibTorch-free module, "
                           f"through " + " -> ".join(p))


def check_torch_depfiles(build, out):
    try:
        text = subprocess.run(["ninja", "-C", build, "-t", "deps"],
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        out.append(f"{build}: cannot read the depfiles (ninja -t deps): {e}")
        return 0
    objects = 0
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            m = re.match(r"src/(\w+)/CMakeFiles/strata_(\w+)\.dir/(\S+)\.o:", line)
            current = m.group(3) if m and m.group(2) in TORCH_FREE else None
            if current:
                objects += 1
                module = m.group(2)
            continue
        if current and re.search(r"/(torch|ATen|c10|caffe2)/", line):
            out.append(f"{build}: strata_{module}'s {current}.o read "
                       f"{line.strip()}")
            current = None
    return objects


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build")
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = read_sources(root)
    problems = []
    modules = check_modules(files, problems)
    for comp in cycles(modules):
        problems.append("module cycle: " + " -> ".join(comp))
    graph = check_files(files, problems)
    check_torch_sources(files, graph, problems)
    objects = check_torch_depfiles(args.build, problems) if args.build else 0
    if args.build and objects == 0:
        problems.append(f"{args.build}: no depfile of a LibTorch-free object "
                        "(build it first: the check would see nothing)")
    if args.graph:
        for m in sorted(modules):
            print(f"{m} -> {', '.join(sorted(modules[m]))}")
    for p in problems:
        print(p)
    edges = sum(len(v) for v in graph.values())
    print(f"layers: {len(files)} files, {edges} includes between them, "
          f"{sum(len(v) for v in modules.values())} module arrows"
          + (f", {objects} LibTorch-free objects' depfiles" if args.build else "")
          + f": {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
