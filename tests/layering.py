#!/usr/bin/env python3
"""The call picture inside a layer has no circle (issue 14): for each directory given, the
files' non-static functions are found by a regex, a file that names another file's function
calls it, and no group of files may call each other in a circle. A lower file tells a higher
one what it must know through an ops struct or a callback (docs/architecture.md, "kernelmgr's
floors"). Prints every circle with the calls inside it; exit status 1 if there is one.

usage: layering.py DIR..."""
import glob
import os
import re
import sys

DEF = re.compile(r"^(?!static)[a-z_][\w \*]*?\b(\w+)\(([^;{]*)\)\s*\{", re.M)


def calls(d):
    files = sorted(glob.glob(os.path.join(d, "*.c")))
    defs = {}
    for f in files:
        for m in DEF.finditer(open(f).read()):
            defs[m.group(1)] = os.path.basename(f)
    edges = {os.path.basename(f): {} for f in files}
    for f in files:
        src = re.sub(r"/\*.*?\*/", "", open(f).read(), flags=re.S)
        src = re.sub(r"//[^\n]*", "", src)
        words = set(re.findall(r"\b\w+\b", src))
        for name, g in defs.items():
            if g != os.path.basename(f) and name in words:
                edges[os.path.basename(f)].setdefault(g, []).append(name)
    return edges


def circles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(dirs):
    bad = 0
    for d in dirs:
        edges = calls(d)
        if not edges:
            print(f"{d}: no C files")
            bad = 1
        for comp in circles(edges):
            bad = 1
            print(f"{d}: files calling each other in a circle: {', '.join(comp)}")
            for a in comp:
                for g, names in sorted(edges[a].items()):
                    if g in comp:
                        print(f"   {a} -> {g}: {', '.join(sorted(names))}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
