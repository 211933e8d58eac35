#!/usr/bin/python3
"""layers.py - checks server/LAYERS against the built objects: which object file calls which
(nm: a symbol one object leaves undefined and another defines), then fails on a call from a
module to one above it and on files that call each other in a circle.

usage: layers.py SRC_DIR BUILD_DIR
"""
import os
import subprocess
import sys


def read_layers(path):
    order = []  # (module, folder), top first
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if len(line) >= 2:
            order.append((line[0], line[1]))
    return order


def objects(build):
    """Object files of the server's libraries and tpud: {source path relative to server/: .o}."""
    found = {}
    for lib in ("tpuutil.dir", "tpuaudit.dir", "tpuserver.dir", "tpud.dir"):
        root = os.path.join(build, "server", "CMakeFiles", lib)
        for dirpath, _, files in os.walk(root):
            for f in files:
                if f.endswith(".c.o"):
                    rel = os.path.relpath(os.path.join(dirpath, f), root)[: -len(".o")]
                    found[rel] = os.path.join(dirpath, f)
    return found


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVW":
            defined.add(name)
    return defined, undefined


def module_of(src, order):
    folder = os.path.dirname(src) or "."
    for i, (mod, f) in enumerate(order):
        if f == folder:
            return i, mod
    return None, None


def main():
    src_dir, build = sys.argv[1], sys.argv[2]
    order = read_layers(os.path.join(src_dir, "server", "LAYERS"))
    objs = objects(build)
    if not objs:
        print("no object files under %s/server: build first" % build)
        return 2
    defs, uses = {}, {}
    for src, obj in objs.items():
        d, u = symbols(obj)
        uses[src] = u
        for s in d:
            defs.setdefault(s, src)
    edges = {}
    for src, u in uses.items():
        edges[src] = sorted({defs[s] for s in u if s in defs and defs[s] != src})
    bad = []
    for src in sorted(edges):
        i, mod = module_of(src, order)
        if i is None:
            bad.append("%s: its folder is not a module of server/LAYERS" % src)
            continue
        for dst in edges[src]:
            j, dmod = module_of(dst, order)
            if j is None or j >= i or dmod == mod:
                continue
            syms = sorted(s for s in uses[src] if defs.get(s) == dst)
            bad.append("upward call: %s (%s) calls %s (%s): %s" %
                       (src, mod, dst, dmod, ", ".join(syms[:4])))
    # Circles between files: strongly connected components (Tarjan) of more than one file.
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v, counter=[0]):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
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
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in sccs:
        bad.append("files call each other in a circle: " + " <-> ".join(comp))
    nmods = {}
    for src in edges:
        nmods.setdefault(module_of(src, order)[1], []).append(src)
    print("%d object files in %d modules, %d calls between files" %
          (len(edges), len(nmods), sum(len(v) for v in edges.values())))
    for line in bad:
        print("FAIL " + line)
    if not bad:
        print("ok: every call points down server/LAYERS, and no files call each other in a circle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
