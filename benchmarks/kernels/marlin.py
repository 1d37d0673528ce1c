"""Marlin (IST-DASLab/marlin, fp16 x int4 g128) built from source as a peer of the kernel benches.

    python -m benchmarks.kernels.marlin --build marlin-nohint|marlin   # one build (~30-60 s)
    python -m benchmarks.kernels.marlin --check marlin-nohint [--out FILE]   # vs fp32
    python -m benchmarks.kernels.marlin --patch-only DIR               # the patched source only

The source is never in the tree: `git -C <marlin mirror> archive HEAD | tar -x -C .peers/marlin`
(the git-ignored `.peers/`; the GPU call carries it). Two builds, by
`torch.utils.cpp_extension.load` with the card's nvcc (TORCH_CUDA_ARCH_LIST=9.0 from the runner),
from scratch copies:

- "marlin-nohint" (M <= NOHINT_MAX_M): `cp_async4_stream`'s body is a plain 16-byte
  `cp.async.cg.shared.global` with no L2 cache hint. With CUDA 13.0's nvcc the published source
  dies with "illegal instruction" at M <= 16 g128 (the evict-first policy register set up by
  `createpolicy` is never set up in the generated code; an outside H100 run, 2026-12-06).
- "marlin" (prefill): the source unmodified. The no-hint build passed Marlin's own tests at
  M = 1..64 in that run but gave wrong, run-to-run varying output at M = 2048, so prefill stays on
  the published code.

Every timed cell checks its output against an fp32 reference in the same run, before and after
the timing (`Cell.check`: ||C - ref|| / ||ref|| <= REL_BOUND, C poisoned with NaN first); a cell
whose check fails is reported as failed, not timed. Weights: fake-quantized random fp16 packed
by Marlin's own `marlin.Layer.pack` (symmetric int4, g128, fp16 scales), once a shape.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / ".peers" / "marlin"  # Marlin's checkout: setup.py, marlin/{__init__.py,*.cpp,*.cu}
BUILD = Path("/tmp/paro-marlin-build")  # scratch copies + torch extension build folders
BUILDS = ("marlin-nohint", "marlin")
NOHINT_MAX_M = 64  # the no-hint build's band (its measured-good M); the published one above
# fp16 output rounding (2^-11 relative an element) after an fp32-accumulated dot of weights
# dequantized exactly as the reference's: a right answer lands near 3e-4, a race or an unwritten
# tile at 1e-2 and more.
REL_BOUND = 2e-3
G = 128
THREADS_AUTO = -1  # thread_k / thread_n / sms: Marlin's own choice
MAX_PAR = 16  # Marlin's default: batch-64 problems in parallel (workspace n / 128 * 16 ints)

_PLAIN_COPY = """__device__ inline void cp_async4_stream(void* smem_ptr, const void* glob_ptr) {
  const int BYTES = 16;
  uint32_t smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  asm volatile(
    "{\\n"
    "   cp.async.cg.shared.global [%0], [%1], %2;\\n"
    "}\\n" :: "r"(smem), "l"(glob_ptr), "n"(BYTES)
  );
}
"""
_STREAM_FN = re.compile(
    r"__device__ inline void cp_async4_stream\(void\* smem_ptr, const void\* glob_ptr\) \{\n"
    r".*?\n\}\n",
    re.S,
)


def build_for(m: int) -> str:
    """The build a cell of M rows uses."""
    return "marlin-nohint" if m <= NOHINT_MAX_M else "marlin"


def patch_nohint(cu: str) -> str:
    """Marlin's kernel source with `cp_async4_stream` as a plain `cp.async.cg` (no L2 hint)."""
    out, count = _STREAM_FN.subn(lambda _: _PLAIN_COPY, cu)
    if count != 1:
        raise RuntimeError(f"marlin_cuda_kernel.cu: {count} cp_async4_stream bodies, expected 1")
    left = [w for w in ("createpolicy", "cache_hint") if w in out]
    if left:
        raise RuntimeError(f"marlin_cuda_kernel.cu: patched copy still holds {left}")
    return out


def scratch_source(build: str, dest: Path) -> list[Path]:
    """Copy (and for marlin-nohint patch) Marlin's two sources into `dest`; return their paths."""
    kdir = SRC / "marlin"
    if not (kdir / "marlin_cuda_kernel.cu").exists():
        raise FileNotFoundError(f"{kdir}/marlin_cuda_kernel.cu: fetch Marlin into {SRC} first "
                                "(git archive HEAD | tar -x -C .peers/marlin)")  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    cu_text = (kdir / "marlin_cuda_kernel.cu").read_text()
    texts = {"marlin_cuda.cpp": (kdir / "marlin_cuda.cpp").read_text(),
             "marlin_cuda_kernel.cu": patch_nohint(cu_text) if build == "marlin-nohint"
             else cu_text}  # fmt: skip
    for fname, text in texts.items():
        # unchanged files keep their mtime: a later process's `load` finds the build up to date
        if not (dest / fname).exists() or (dest / fname).read_text() != text:
            (dest / fname).write_text(text)
    return [dest / fname for fname in texts]


_FAILED: dict[str, str] = {}


@functools.cache
def _load(build: str) -> Any:
    from torch.utils import cpp_extension

    sources = scratch_source(build, BUILD / f"src-{build}")
    out = BUILD / f"ext-{build}"
    out.mkdir(parents=True, exist_ok=True)
    name = "marlin_cuda_nohint" if build == "marlin-nohint" else "marlin_cuda"
    return cpp_extension.load(name=name, sources=[str(s) for s in sources],
                              extra_cuda_cflags=["-O3"], build_directory=str(out),
                              verbose=False)  # fmt: skip


def load(build: str) -> Any:
    """The built extension (`mul`); a build that failed once fails fast after."""
    if build not in BUILDS:
        raise ValueError(f"marlin build {build!r}: one of {BUILDS}")
    if build in _FAILED:
        raise RuntimeError(f"{build}: build failed earlier: {_FAILED[build]}")
    try:
        return _load(build)
    except Exception as e:
        _FAILED[build] = f"{type(e).__name__}: {str(e)[-400:]}"
        raise


@functools.cache
def _marlin_py() -> Any:
    """Marlin's Python module (for `Layer.pack`, which needs no kernel); its `import marlin_cuda`
    gets whichever build loads."""
    if "marlin_cuda" not in sys.modules:
        try:
            sys.modules["marlin_cuda"] = load("marlin-nohint")
        except Exception:
            sys.modules["marlin_cuda"] = load("marlin")
    # its package file alone, not its checkout on sys.path (whose bench.py / test.py would
    # shadow other modules)
    spec = importlib.util.spec_from_file_location("marlin", SRC / "marlin" / "__init__.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"{SRC}/marlin/__init__.py: not a Python module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def packed(
    n: int, k: int, seed: int = 0, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B [K/16, 2N] int32 in Marlin's layout, s [K/G, N] fp16 permuted, W [K, N] fp16 the
    fake-quantized weight the reference multiplies) for a random g128 layer, via `Layer.pack`."""
    mod = _marlin_py()
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    w = torch.randn(k // G, G, n, device=dev, dtype=torch.float16, generator=gen)
    s = w.abs().amax(1, keepdim=True) * (2 / 15)  # Marlin's gen_quant4: symmetric, maxq 15
    q = (torch.round(w / s).int() + 8).clamp(0, 15)
    ref = ((q - 8).half() * s).reshape(k, n)
    linear = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.float16)
    linear.weight.data = ref.t()
    layer = mod.Layer(k, n, groupsize=G).to(dev)
    layer.pack(linear, s.reshape(k // G, n).t())
    return layer.B.contiguous(), layer.s.contiguous(), ref.contiguous()


def mul(ext: Any, a: torch.Tensor, b: torch.Tensor, s: torch.Tensor, ws: torch.Tensor,
        c: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """C [M, N] fp16 = A [M, K] fp16 @ dequant(B); Marlin's `mul` with its automatic tiles."""
    if c is None:
        c = torch.empty(a.shape[0], s.shape[1], dtype=torch.float16, device=a.device)
    ext.mul(a, b, c, s, ws, THREADS_AUTO, THREADS_AUTO, THREADS_AUTO, MAX_PAR)
    return c


def workspace(n: int, dev: torch.device) -> torch.Tensor:
    """Marlin's lock workspace (zeroed; each call leaves it zeroed)."""
    return torch.zeros(n // 128 * MAX_PAR, dtype=torch.int32, device=dev)


class Cell:
    """One Marlin cell: a closure over DRAM-fed weight copies (`__call__`, for `time_us`) that
    can check its output against the fp32 reference (`check`)."""

    def __init__(self, n: int, k: int, m: int, copies: int, build: str | None = None) -> None:
        self.build = build or build_for(m)
        self.ext = load(self.build)
        dev = torch.device("cuda")
        b, s, self.ref_w = packed(n, k)
        # copies of one packed layer: the same values at other addresses, so each call reads DRAM
        self.ws = [(b.clone(), s.clone()) for _ in range(max(1, copies))]
        self.work = workspace(n, dev)
        self.a = torch.randn(m, k, device=dev, dtype=torch.float16)
        self.i = 0

    def __call__(self) -> torch.Tensor:
        b, s = self.ws[self.i % len(self.ws)]
        self.i += 1
        return mul(self.ext, self.a, b, s, self.work)

    def check(self) -> float:
        """||C - ref|| / ||ref|| over every weight copy (NaN-poisoned output; NaN = unwritten)."""
        ref = self.a.float() @ self.ref_w.float()
        worst = 0.0
        for b, s in self.ws:
            c = torch.full(ref.shape, float("nan"), dtype=torch.float16, device=ref.device)
            mul(self.ext, self.a, b, s, self.work, c)
            torch.cuda.synchronize()
            rel = float((c.float() - ref).norm() / ref.norm())
            if not rel <= worst:  # larger, or NaN (an unwritten element): NaN sticks
                worst = rel
                if rel != rel:
                    break
        return worst

    @staticmethod
    def ok(rel: float) -> bool:
        return rel == rel and rel <= REL_BOUND


def peer(n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device) -> Cell:
    """The peers bench's builder: a `Cell` over weight copies past 4x the L2."""
    from benchmarks.kernels.common import copies

    return Cell(n, k, m, copies(k * n // 2 + (k // G) * n * 2))


CHECK_CELLS: list[tuple[str, tuple[int, ...]]] = [
    ("qkv", (1, 2, 4, 8, 16, 32, 64, 2048)),
    ("gate_up", (1, 16, 64, 2048, 8192)),
    ("down", (1, 8, 32, 2048)),
]


def check_all(out: str | None = None, builds: tuple[str, ...] = BUILDS) -> bool:
    """`builds` in their bands on the 27B shapes, each cell twice (a moving error is a race);
    True when every cell passed. One process a build: a kernel fault ends its CUDA context."""
    from benchmarks.kernels.common import SHAPES

    rows: list[dict[str, Any]] = []
    for name, ms in CHECK_CELLS:
        _, n, k, _ = next(s for s in SHAPES if s[0] == name)
        for m in ms:
            if build_for(m) not in builds:
                continue
            t = time.monotonic()
            try:
                cell = Cell(n, k, m, 2)
                rels = [cell.check(), cell.check()]
                err = ""
            except Exception as e:
                rels, err = [float("nan")], f"{type(e).__name__}: {str(e)[:300]}"
            ok = all(Cell.ok(r) for r in rels) and not err
            rows.append({"shape": name, "m": m, "build": build_for(m), "rel": rels, "ok": ok,
                         "bound": REL_BOUND, "error": err})  # fmt: skip
            print(f"marlin check {name} M={m} {build_for(m)}: rel {rels} "
                  f"{'ok' if ok else 'FAILED'} {err[:120]} ({time.monotonic() - t:.1f} s)",
                  flush=True)  # fmt: skip
            if out:
                Path(out).write_text(json.dumps({"rows": rows}, indent=1))
    return all(r["ok"] for r in rows)


def main(argv: list[str] | None = None) -> None:
    """Build, check, or write the patched source."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", choices=BUILDS, action="append", default=[])
    ap.add_argument(
        "--check",
        choices=BUILDS,
        action="append",
        default=[],
        help="this build vs fp32 in its M band (exit 1 on a fail)",
    )
    ap.add_argument("--patch-only", default="", help="write the no-hint source into this folder")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if args.patch_only:
        print("\n".join(str(p) for p in scratch_source("marlin-nohint", Path(args.patch_only))))
        return
    for b in args.build:
        t = time.monotonic()
        load(b)
        print(f"marlin build {b}: {time.monotonic() - t:.0f} s", flush=True)
    if args.check and not check_all(args.out or None, tuple(args.check)):
        sys.exit(1)


if __name__ == "__main__":
    main()
