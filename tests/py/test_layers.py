"""test_layers.py — the tree's include graph keeps to the layer order (scripts/check_layers.py).

1. The check on the tree: no cycle between files and no upward include beyond the allow-list
   (scripts/layers_allow.txt); the module map of ARCHITECTURE.md and the libraries of
   CMakeLists.txt match the layer order.
2. Self-checks, so the check is not vacuous: a synthetic loop of three units is one cycle; a
   source file and its header are one unit (and its `x_impl.h` with it), a lone header its own;
   the layer order parses from a Layers block; a file belongs to its longest listed folder.
Runnable as a script; prints "N passed, N failed".
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "scripts"))
import check_layers  # noqa: E402


S = "src" + "/"  # synthetic paths, not the tree's


def main():
    r = Results()
    out = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "check_layers.py")],
                         capture_output=True, text=True)
    print(out.stdout, end="")
    r.check(out.returncode == 0, "check_layers.py passes on the tree")
    r.check("cycles between files:" in out.stdout and "upward includes:" in out.stdout,
            "check_layers.py prints its summary")

    succ = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    comps = check_layers.strongly_connected({"a", "b", "c", "d"}, succ)
    r.check(comps == [["a", "b", "c"]], f"a loop of three units is one cycle: {comps}")
    r.check(check_layers.strongly_connected({"a", "b"}, {"a": {"b"}}) == [],
            "a one-way include is no cycle")

    files = ["src/x/a.c", "src/x/a.h", "src/x/a_impl.h", "src/x/lone.h", "src/x/b_impl.h"]
    u = check_layers.unit_of(files)
    r.check(u["src/x/a.c"] == u["src/x/a.h"] == u["src/x/a_impl.h"] == "src/x/a",
            f"a source, its header and its private header are one unit: {u}")
    r.check(u["src/x/lone.h"] == "src/x/lone.h" and u["src/x/b_impl.h"] == "src/x/b_impl.h",
            f"a header without a source of its name is its own unit: {u}")

    order = check_layers.layer_order("## Layers\ntext\n```\ncore → kv →\nbackend → backend/cuda\n```\n")
    r.check(order == ["core", "kv", "backend", "backend/cuda"], f"the layer order parses: {order}")
    r.check(check_layers.module_of(S + "backend/cuda/x.c", order) == "backend/cuda" and
            check_layers.module_of(S + "backend/cpu/ops.c", order) == "backend" and
            check_layers.module_of(S + "other/y.c", order) is None,
            "a file belongs to the longest listed folder that holds it")
    r.done()


if __name__ == "__main__":
    main()
