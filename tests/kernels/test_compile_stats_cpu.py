"""The GPU suite's compile-stats plugin (`_compile_stats`, loaded by kernels/gpushard.sh) on CPU:
a pytest run in a subprocess on two xdist workers (as the GPU scripts run it), its tests
building a kernel through `triton.compiler.compile` for the gfx1201 / sm_90 targets (Triton's
AOT path needs no GPU), writes each test's compiles into its JUnit test case; a test that
builds nothing says 0, and a cache hit is a call but not a build."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = """
import triton, triton.language as tl
from paro_kernels.triton.aot import TARGETS

@triton.jit
def add_one(x_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)

def _build(target, n):
    src = triton.compiler.ASTSource(fn=add_one, signature={"x_ptr": "*fp32"}, constexprs={"n": n})
    return triton.compiler.compile(src, target=TARGETS[target][0])

def test_two_builds():
    _build("sm90", 64)
    _build("gfx1201", 128)
    _build("sm90", 64)  # the on-disk cache's: a call, not a build

def test_nothing_built():
    assert 1 + 1 == 2
"""


def test_plugin_counts_each_tests_compiles(tmp_path: Path) -> None:
    (tmp_path / "test_cases_cs.py").write_text(CASES)
    xml = tmp_path / "out.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "TRITON_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-p",
         "_compile_stats", "-n", "2", f"--junitxml={xml}", str(tmp_path / "test_cases_cs.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    props = {
        tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
        for tc in ET.parse(xml).getroot().iter("testcase")
    }
    built = props["test_two_builds"]["triton_compiles"]
    assert built.startswith("3 calls, 2 built, "), built  # a fresh cache: two built, one read
    compile_s = float(built.split(", ")[2].removesuffix(" s"))
    assert compile_s > 0.05, built
    # compiling is CPU work (LLVM in the process, ptxas a child): most of it shows as CPU time
    own, kids = (float(v.split()[0]) for v in props["test_two_builds"]["cpu_s"].split(", "))
    assert own + kids >= 0.5 * compile_s, (own, kids, compile_s)
    own, kids = (float(v.split()[0]) for v in props["test_nothing_built"]["cpu_s"].split(", "))
    assert 0 <= own < 0.5 and kids == 0, (own, kids)
    assert props["test_nothing_built"]["triton_compiles"] == "0 calls, 0 built, 0.00 s"
