"""Whether a refactor left the served kernels' machine code alone: build one plan's kernels from
two source trees for sm_90 and gfx1201 (the compile-only stand-in of `precompile`, on this CPU:
no GPU) and compare each kernel's PTX / AMDGCN, debug info and source paths aside.

    python benchmarks/gpu/asm_same.py OLD_REV [NEW_REV] [--plan PLAN.json] [--work DIR]

NEW_REV defaults to the working tree (its tracked files as they are on disk). The plan
(`tests/kernels/data/asm_same_plan.json`: W4A16 and W4A8 layers at G = 128 and 64 and a
gate_up-size one, MXFP4 layers; the decode Ms to 48, past the four tiles into the chunks, and
one prefill M) names what the launcher launches (`paro_vllm.kernel_cache.Plan`).
Prints, per target and kernel, how many specializations each tree built, how many have the same
asm and how many the same body (the asm but its parameter declarations: a removed runtime
argument changes only those); exit 1 where a kernel's body differs or one tree built a kernel
the other did not.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where a tree keeps the compile-only cache builder: benchmarks/gpu/ from 2026-12-06 on, kernels/
# before (e.g. d3903bc); a comparison across the move finds it in either.
BUILDERS = ("benchmarks/gpu/precompile_check.py", "kernels/precompile_h200.py")
TARGETS = {"sm90": "ptx", "gfx1201": "amdgcn"}


def export(rev: str, dest: Path) -> None:
    """The tree at `rev` ("work": the working tree's tracked files) into dest."""
    dest.mkdir(parents=True)
    if rev == "work":
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                               capture_output=True).stdout  # fmt: skip
        tar = subprocess.run(["tar", "cf", "-", "--null", "-T", "-"], cwd=REPO, input=files,
                             check=True, capture_output=True).stdout  # fmt: skip
    else:
        tar = subprocess.run(["git", "archive", rev], cwd=REPO, check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "xf", "-", "-C", str(dest)], input=tar, check=True)


def builder(tree: Path) -> Path:
    """The tree's cache builder script, wherever that tree keeps it."""
    for rel in BUILDERS:
        if (tree / rel).is_file():
            return tree / rel
    raise FileNotFoundError(f"{tree}: none of {', '.join(BUILDERS)}")


def build(tree: Path, plan: Path, out: Path) -> None:
    """Every target's cache of the plan, compiled from `tree`'s sources."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'kernels'}:{tree / 'plugin'}"}
    script = builder(tree)
    for target in TARGETS:
        subprocess.run([sys.executable, str(script), "--plan",
                        str(plan), "--out", str(out / target), "--target", target],
                       check=True, env=env)  # fmt: skip


# AMDGCN instructions whose source operands commute. The gfx1201 backend does not order them the
# same way on every build: d3903bc built twice from one tree on one CPU machine (2026-12-06,
# Triton 3.9) gave `v_xor3_b32 v1, v6, s12, v100` in one build and `v1, s12, v6, v100` in the
# other (one of 4 w4a16_gemm_kernel specializations, the only difference in 48).
COMMUTATIVE = re.compile(r"^(v_(?:xor3|or3)_b32|v_add3_u32) (\S+), (.+)$")


def _canonical(line: str) -> str:
    """One instruction with commuting source operands in a fixed (sorted) order."""
    m = COMMUTATIVE.match(line)
    if not m:
        return line
    return f"{m[1]} {m[2]}, {', '.join(sorted(m[3].split(', ')))}"


def normalized(path: Path, tree: Path) -> list[str]:
    """The asm without debug sections, location lines, debug-scope labels (PTX `$L__tmpN:`,
    which only the cut debug sections name: an inlined helper adds them), comments and the
    tree's path; commuting operands in a fixed order."""
    txt = path.read_text().replace(str(tree), "TREE")
    cut = re.search(r"^\s*\.section\s+\.debug", txt, re.M)
    txt = txt[: cut.start()] if cut else txt
    skip = re.compile(r"\s*(\.loc|\.file|//|;|\.ident|\.b8|\$L__tmp\d+:\s*$)")
    keep = (ln for ln in txt.splitlines() if not skip.match(ln))
    return [_canonical(re.sub(r"\s+", " ", ln).strip()) for ln in keep if ln.strip()]


def _body(asm: list[str]) -> list[str]:
    return [ln for ln in asm if not ln.startswith(".param")]  # the declarations, not the loads


def kernels(root: Path, ext: str, tree: Path) -> dict[str, list[list[str]]]:
    """Kernel name -> the normalized asm of each specialization (sorted)."""
    out: dict[str, list[list[str]]] = collections.defaultdict(list)
    for f in root.glob(f"*/*.{ext}"):
        out[json.loads(f.with_suffix(".json").read_text())["name"]].append(normalized(f, tree))
    return {k: sorted(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default="work")
    ap.add_argument(
        "--plan", type=Path, default=REPO / "tests" / "kernels" / "data" / "asm_same_plan.json"
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/asm_same"))
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    trees = {}
    for side, rev in (("old", a.old), ("new", a.new)):
        trees[side] = a.work / side / "tree"
        export(rev, trees[side])
        build(trees[side], a.plan.resolve(), a.work / side / "cache")
    same = True
    for target, ext in TARGETS.items():
        old, new = (kernels(a.work / s / "cache" / target, ext, trees[s]) for s in ("old", "new"))
        for name in sorted(set(old) | set(new)):
            va, vb = old.get(name, []), new.get(name, [])
            pairs = list(zip(va, vb, strict=False))
            equal = sum(x == y for x, y in pairs)
            body = sum(_body(x) == _body(y) for x, y in pairs)
            print(f"{target} {name}: {len(va)} / {len(vb)} specializations, {equal} same asm, "
                  f"{body} same body")  # fmt: skip
            if len(va) != len(vb) or equal != len(va):
                same = same and len(va) == len(vb) and body == len(va)
                for x, y in pairs:
                    diff = list(difflib.unified_diff(x, y, lineterm="", n=0))
                    print("\n".join(f"    {ln}" for ln in diff[2:14]))
    print("same bodies" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
