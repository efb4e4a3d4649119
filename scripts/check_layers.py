#!/usr/bin/env python3
"""check_layers.py — the include graph of src/ and include/ against the layer order.

Reads every `#include "..."` of the C/CUDA sources and headers under src/ and include/ (a name is
looked up next to the including file, then under src/, then under include/; names found in
neither, the system's and the CUDA toolkit's, are not the tree's and are skipped) and builds the
file graph. A node is a unit: a source file, the header of the same name in the same folder and
its private header (`x.c` + `x.h` + `x_impl.h`, `x.cu` + `x.h`) are one node, as they are one
piece of code and its interfaces; every other file (a header without a source of its name, a
`.cuh`, an `.inc`) is a node of its own. Then:

1. Cycles: every strongly connected set of units (two or more) is a cycle between files.
2. Layers: the order is the fenced block of ARCHITECTURE.md's "## Layers" section, lowest first:
   `a → b → c ...`, each name a folder under src/ (`backend/cuda` is the folder in src/backend)
   or `include` (the public header). A file belongs to the longest listed folder that contains
   it; a file in a folder the order does not list is an error. An include from a lower layer to
   a higher one is an upward include.
3. Modules: every folder of the order is one line of the module map and one CMake library:
   the map's rows (`| `src/<folder>/` | ...`) and the layer names must match one to one, and each
   `snug_module(NAME DIRS ... DEPS ...)` of CMakeLists.txt may link only modules below it.

Allowed exceptions are listed in scripts/layers_allow.txt, one a line, with a reason after `#`:
`cycle: UNIT UNIT ...` (the units of one cycle, as printed, any order) or `edge: FILE -> FILE`
(an upward include). An allowed entry that no longer occurs is reported (not an error).

Prints the summary, the cycles and upward includes found; exits 1 if any is not allowed, or
the layer order or the module map is broken. Runnable from anywhere: paths are the tree's.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_EXT = (".c", ".cu", ".cpp")
HEADER_EXT = (".h", ".cuh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def tree_files():
    out = []
    for top in ("src", "include"):
        for root, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in sorted(names):
                if n.endswith(SOURCE_EXT + HEADER_EXT):
                    out.append(os.path.relpath(os.path.join(root, n), ROOT))
    return out


def include_edges(files):
    present = set(files)
    edges = defaultdict(set)
    for f in files:
        for name in INCLUDE.findall(read(f)):
            for base in (os.path.dirname(f), "src", "include"):
                cand = os.path.normpath(os.path.join(base, name))
                if cand in present:
                    if cand != f:
                        edges[f].add(cand)
                    break
    return edges


def unit_of(files):
    """file -> unit name: a source file, the header of the same name in its folder and, when
    that source exists, its private header (`x_impl.h`: the inside of x's types, shared by the
    module's files) are one unit; a header without a source of its name is a node of its own."""
    present = set(files)
    groups = defaultdict(list)
    for f in files:
        stem = os.path.splitext(f)[0]
        if f.endswith("_impl.h") and any(
            stem[: -len("_impl")] + ext in present for ext in SOURCE_EXT
        ):
            stem = stem[: -len("_impl")]
        groups[stem].append(f)
    unit = {}
    for stem, group in groups.items():
        has_source = any(g.endswith(SOURCE_EXT) for g in group)
        for g in group:
            paired = has_source and len(group) > 1 and not g.endswith((".cuh", ".inc"))
            unit[g] = stem if paired else g
    return unit


def strongly_connected(nodes, succ):
    """Tarjan's algorithm, iterative; components of two or more nodes, each sorted."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
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
                    comps.append(sorted(comp))
    return sorted(comps)


def layer_order(arch_text):
    """The fenced block after '## Layers': names joined by arrows, lowest first."""
    m = re.search(r"^## Layers\b.*?^```[^\n]*\n(.*?)^```", arch_text, re.M | re.S)
    if not m:
        return None
    names = [n.strip() for n in re.split(r"→|->|\n", m.group(1)) if n.strip()]
    return names


def module_of(path, order):
    if path.startswith("include/"):
        return "include" if "include" in order else None
    best = None
    for name in order:
        if name == "include":
            continue
        prefix = "src/" + name + "/"
        if path.startswith(prefix) and (best is None or len(name) > len(best)):
            best = name
    return best


def module_map_rows(arch_text):
    """Folders named by the module map's first column: | `src/<folder>/` | ... (plus include/)."""
    m = re.search(r"^## Module map.*?\n(.*?)(?=^## |\Z)", arch_text, re.M | re.S)
    rows = []
    for line in (m.group(1) if m else "").splitlines():
        c = re.match(r"\|\s*`(src/[^`]+?)/?`\s*\|", line)
        if c:
            rows.append(c.group(1)[len("src/"):])
        elif re.match(r"\|\s*`include/", line):
            rows.append("include")
    return rows


def cmake_modules(cmake_text):
    """snug_module(NAME DIRS d... DEPS x...) -> {NAME: (dirs, snug_* deps)}."""
    mods = {}
    for m in re.finditer(r"^snug_module\(([^)]*)\)", cmake_text, re.M):
        words = m.group(1).split()
        name, dirs, deps, part = words[0], [], [], None
        for w in words[1:]:
            if w in ("DIRS", "DEPS"):
                part = w
            elif part == "DIRS":
                dirs.append(w)
            elif part == "DEPS" and w.startswith("snug_"):
                deps.append(w[len("snug_"):])
        mods[name] = (dirs, deps)
    return mods


def read_allow(path):
    cycles, edges = [], []
    if not os.path.exists(path):
        return cycles, edges
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            kind, _, rest = body.partition(":")
            if kind.strip() == "cycle":
                cycles.append(frozenset(rest.split()))
            elif kind.strip() == "edge":
                a, _, b = rest.partition("->")
                edges.append((a.strip(), b.strip()))
            else:
                raise SystemExit(f"{path}:{n}: expected 'cycle: UNIT ...' or 'edge: A -> B'")
    return cycles, edges


def main():
    arch_text = read("ARCHITECTURE.md")
    order = layer_order(arch_text)
    problems = []
    if not order:
        print("ARCHITECTURE.md: no '## Layers' section with a fenced `a → b → ...` block")
        return 1
    rank = {name: i for i, name in enumerate(order)}
    files = tree_files()
    edges = include_edges(files)
    unit = unit_of(files)
    allow_cycles, allow_edges = read_allow(os.path.join(ROOT, "scripts", "layers_allow.txt"))

    # module of every file
    module = {}
    for f in files:
        module[f] = module_of(f, order)
        if module[f] is None:
            problems.append(f"{f}: its folder is not in the layer order (ARCHITECTURE.md Layers)")

    # the unit graph and its cycles
    succ = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if unit[a] != unit[b]:
                succ[unit[a]].add(unit[b])
    units = set(unit.values())
    cycles = strongly_connected(units, succ)

    # upward includes and the module graph
    upward = []
    mod_edges = defaultdict(int)
    for a in sorted(edges):
        for b in sorted(edges[a]):
            ma, mb = module.get(a), module.get(b)
            if ma is None or mb is None or ma == mb:
                continue
            mod_edges[(ma, mb)] += 1
            if rank[ma] < rank[mb]:
                upward.append((a, b))

    # module map and CMake libraries
    rows = module_map_rows(arch_text)
    if sorted(rows) != sorted(order):
        missing = sorted(set(order) - set(rows))
        extra = sorted(set(rows) - set(order))
        problems.append(f"module map vs layer order: no row for {missing}; rows not in the order: {extra}")
    cmake_text = read("CMakeLists.txt")
    mods = cmake_modules(cmake_text)
    for name, (dirs, deps) in sorted(mods.items()):
        layer = dirs[0] if dirs else name
        if layer not in rank:
            problems.append(f"CMakeLists.txt: snug_{name} builds {dirs}, not a layer of the order")
            continue
        for d in dirs:
            if d not in rank and not any(d.startswith(o + "/") for o in order):
                problems.append(f"CMakeLists.txt: snug_{name} builds src/{d}, not in the order")
            elif d in rank and d != layer:
                problems.append(f"CMakeLists.txt: snug_{name} builds two layers ({layer}, {d})")
        for dep in deps:
            dl = mods.get(dep, ([dep], []))[0]
            dl = dl[0] if dl else dep
            if dl in rank and rank[dl] >= rank[layer]:
                problems.append(f"CMakeLists.txt: snug_{name} links snug_{dep}, not below it")
    built = {d for dirs, _ in mods.values() for d in dirs}
    for name in order:
        if name in ("include", "cli", "backend/cuda"):
            continue  # the public header; the `snug` executable; libsnug_cuda.so (own rules)
        if name not in built:
            problems.append(f"CMakeLists.txt: no snug_module builds src/{name}")

    # report
    n_edges = sum(len(v) for v in edges.values())
    print(f"layers ({len(order)}): " + " → ".join(order))
    print(f"{len(files)} files, {len(units)} units, {n_edges} includes between files, "
          f"{sum(len(v) for v in succ.values())} between units")
    print("module dependencies (includes per pair):")
    for ma in order:
        outs = [f"{mb} ({mod_edges[(ma, mb)]})" for mb in order if mod_edges.get((ma, mb))]
        if outs:
            print(f"  {ma} → " + ", ".join(outs))
    bad = 0
    used_cycles, used_edges = set(), set()
    print(f"cycles between files: {len(cycles)}")
    for comp in cycles:
        cs = set(comp)
        ok = frozenset(comp) in allow_cycles
        if ok:
            used_cycles.add(frozenset(comp))
        else:
            bad += 1
        print(f"  {'allowed' if ok else 'CYCLE'}: " + " ".join(comp))
        for a in comp:
            for f in sorted(x for x in files if unit[x] == a):
                for b in sorted(edges.get(f, ())):
                    if unit[b] in cs and unit[b] != a:
                        print(f"      {f} -> {b}")
    print(f"upward includes: {len(upward)}")
    for a, b in upward:
        ok = (a, b) in allow_edges
        if ok:
            used_edges.add((a, b))
        else:
            bad += 1
        print(f"  {'allowed' if ok else 'UPWARD'}: {a} ({module[a]}) -> {b} ({module[b]})")
    for c in allow_cycles:
        if c not in used_cycles:
            print("  note: allowed cycle no longer present: " + " ".join(sorted(c)))
    for e in allow_edges:
        if e not in used_edges:
            print(f"  note: allowed edge no longer present: {e[0]} -> {e[1]}")
    for p in problems:
        print("  ERROR: " + p)
    bad += len(problems)
    print("ok" if bad == 0 else f"{bad} problem(s)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
