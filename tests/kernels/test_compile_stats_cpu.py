"""The GPU suite's pytest plugins, on CPU. The compile-stats plugin (`_compile_stats`, loaded by
benchmarks/gpu/shard.sh) on CPU: a pytest run in a subprocess on two xdist workers (as the GPU
scripts run it), its tests building a kernel through `triton.compiler.compile` for the gfx1201 /
sm_90 targets (Triton's AOT path needs no GPU), writes each test's compiles into its JUnit test
case; a test that builds nothing says 0, and a cache hit is a call but not a build. The
GPU-spread plugin (`_gpu_spread`): on a machine of several GPUs each xdist worker sees one GPU
alone."""

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


def _env(**extra: str) -> dict[str, str]:
    """This environment for a pytest run of its own: the outer run's xdist variables dropped
    (under CI's xdist they would say the inner controller is a worker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**env, **extra}


def test_plugin_counts_each_tests_compiles(tmp_path: Path) -> None:
    (tmp_path / "test_cases_cs.py").write_text(CASES)
    xml = tmp_path / "out.xml"
    env = _env(TRITON_CACHE_DIR=str(tmp_path / "cache"))
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
    # compiling is CPU work (LLVM in the process, ptxas a child); how much of its wall time shows
    # as CPU time depends on what else the cores run (the other worker, here), so only > 0
    own, kids = (float(v.split()[0]) for v in props["test_two_builds"]["cpu_s"].split(", "))
    assert own + kids > 0.05, (own, kids, compile_s)
    own, kids = (float(v.split()[0]) for v in props["test_nothing_built"]["cpu_s"].split(", "))
    assert 0 <= own < 0.5 and kids == 0, (own, kids)
    assert props["test_nothing_built"]["triton_compiles"] == "0 calls, 0 built, 0.00 s"


SPREAD = """
import os

def test_where():
    seen = os.path.join(os.environ["SPREAD_SEEN"], os.environ.get("PYTEST_XDIST_WORKER", "main"))
    with open(seen, "w") as f:
        f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
"""


def _spread(
    tmp_path: Path, gpus: str | None, workers: int, visible: str = "7", outer: str = ""
) -> dict[str, str]:
    (tmp_path / "seen").mkdir(parents=True)
    (tmp_path / "test_cases_sp.py").write_text(SPREAD)
    env = _env(CUDA_VISIBLE_DEVICES=visible, SPREAD_SEEN=str(tmp_path / "seen"))
    if outer:  # as if started from inside an outer run's xdist worker
        env["PYTEST_XDIST_WORKER"] = outer
    env.pop("PARO_TEST_GPUS", None)
    if gpus is not None:
        env["PARO_TEST_GPUS"] = gpus
    # --dist each: every worker runs the test, so every worker reports what it saw
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-p",
         "_gpu_spread", "-n", str(workers), "--dist", "each", str(tmp_path / "test_cases_sp.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = {f.name: f.read_text() for f in (tmp_path / "seen").iterdir()}
    assert len(seen) == workers, seen
    return seen


def test_gpu_spread_gives_each_worker_one_gpu(tmp_path: Path) -> None:
    assert _spread(tmp_path / "two", "2", 3, "") == {"gw0": "0", "gw1": "1", "gw2": "0"}
    # a machine already narrowed to two GPUs: its list is indexed
    assert _spread(tmp_path / "list", "2", 2, "2,3") == {"gw0": "2", "gw1": "3"}
    # the inner controller is no worker, whatever the environment it inherited says
    assert _spread(tmp_path / "nested", "2", 2, "2,3", "gw1") == {"gw0": "2", "gw1": "3"}
    # one GPU (or none said): the environment's CUDA_VISIBLE_DEVICES is left as it is
    assert _spread(tmp_path / "one", "1", 2) == {"gw0": "7", "gw1": "7"}
    assert _spread(tmp_path / "unset", None, 2) == {"gw0": "7", "gw1": "7"}
