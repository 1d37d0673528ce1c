"""Kernels compiled ahead of time into Triton's OWN cache layout, and the cache the runtime reads.

Design. A shipped kernel cache is a directory in Triton's file-cache layout
(`<base32 key>/<kernel>.json|.hsaco|.cubin|...` + `__grp__<kernel>.json`), filled by running the
launcher's real host code under a compile-only stand-in for the Triton driver (`standin`):

- the stand-in driver reports the image's `GPUTarget` (gfx1201 / sm_90) and a sentinel device,
  so the JIT's per-device caches stay apart from a real GPU's in the same process;
- `JITFunction.run` is forced to warmup semantics: `kernel[grid](...)` specializes and compiles
  exactly as at run time (pointer alignment, `M == 1` / `M % 16 == 0` / other, constexprs,
  num_warps/num_stages), then returns without launching;
- tensors are torch fake tensors on device "cuda" (no memory, no GPU), so the host code's
  allocations, views and `device.type` checks run unchanged; torch.library custom ops are called
  through their Python bodies (their fake kernels would skip the launches);
- the chip's facts the launcher reads (`sm_count`, `is_hip`, `torch.version.hip`) are patched
  in every `paro_kernels.triton` module that has them: 64 CUs on the R9700, 132 SMs on the H200.

So the on-disk keys are the runtime JIT's by construction: `triton.compile` computes them from
the same source hash, specialization, options and backend hash (bundled ptxas / lld, libdevice
by content). A cache is only valid for the Triton build that wrote it (`triton_key()` hashes
Triton's sources and libtriton), so the image builds its cache inside the image.

The runtime side (`activate`): Triton's cache manager is set to `ShippedCacheManager`, which
looks a key up in the shipped directory first (relocation-safe: group files name absolute paths,
this resolves them inside the shipped key directory) and falls back to the writable
TRITON_CACHE_DIR, where run-time compiles land. `STATS` counts shipped hits and compiles per
kernel; the first compile of each kernel is logged by name.

Measured (H200, 2026-12-01): the sm_90 cache of the 27B TP=2 plans
(tests/kernels/data/precompile_h200_plan.json: W4A8 fp8/token, W4A16, MXFP4 fp8; 80
specializations, 43 MB, built on the CPU dev machine by Triton 3.6 in 348 s) served 10,370
linear calls through the plugin's Triton entry points with 80 shipped hits and 0 JIT compiles,
then 240 calls at random unsampled prefill Ms with 0 JIT compiles; the H200's triton_key
equalled the manifest's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.cache import FileCacheManager
from triton.runtime.jit import JITFunction

log = logging.getLogger("paro_kernels.precompile")


# The JIT's per-device caches are keyed by this while the stand-in is active.
STANDIN_DEVICE = "paro-precompile"


MANIFEST = "paro-manifest.json"


@dataclass(frozen=True)
class Chip:
    """A target GPU as the launcher sees it."""

    name: str
    target: GPUTarget
    sms: int  # CUs / SMs: the split-K and grid rules read it (launch.sm_count)

    @property
    def hip(self) -> bool:
        """Whether this is an AMD chip (the launcher's `is_hip`)."""
        return self.target.backend == "hip"


CHIPS = {
    "gfx1201": Chip("gfx1201", GPUTarget("hip", "gfx1201", 32), 64),  # Radeon R9700: 64 CUs
    "sm90": Chip("sm90", GPUTarget("cuda", 90, 32), 132),  # H200: 132 SMs
}


@dataclass
class Stats:
    """What the kernel cache answered in this process: per kernel name and per key."""

    shipped: Counter[str] = field(default_factory=Counter)
    compiled: Counter[str] = field(default_factory=Counter)
    local: Counter[str] = field(default_factory=Counter)
    keys: dict[str, str] = field(default_factory=dict)  # key -> "shipped" | "compiled" | "local"

    def reset(self) -> None:
        """Forget every count (a test's or a probe's fresh start)."""
        self.shipped.clear()
        self.compiled.clear()
        self.local.clear()
        self.keys.clear()


STATS = Stats()


_SHIPPED: list[Path] = []


def _name(filename: str) -> str:
    return filename.removeprefix("__grp__").removesuffix(".json")


_OURS: set[str] = set()


def _ours(name: str) -> bool:
    """Whether `name` is one of our kernels (vLLM's own Triton kernels share the cache); a name
    not seen yet rescans the loaded modules (a kernel being compiled has its module loaded)."""
    if name not in _OURS:
        _OURS.update(_loaded_kernel_names())
    return name in _OURS


class ShippedCacheManager(FileCacheManager):
    """Triton's file cache with the shipped, read-only kernel cache looked up first."""

    def get_group(self, filename: str) -> dict[str, str] | None:
        """A shipped group resolved inside its key directory, else the writable cache's."""
        for root in _SHIPPED:
            grp = _shipped_group(root / self.key, filename)
            if grp is not None:
                if _ours(_name(filename)):
                    STATS.shipped[_name(filename)] += 1
                    STATS.keys[self.key] = "shipped"
                return grp
        grp = super().get_group(filename)
        if grp is not None and _ours(_name(filename)):
            STATS.local[_name(filename)] += 1
            STATS.keys[self.key] = "local"
        return grp

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        """A compile finished: count it; log the first one of each kernel by name."""
        name = _name(filename)
        if not _ours(name):
            return str(super().put_group(filename, group))
        if not STATS.compiled[name]:
            log.warning("paro kernels: JIT compile of %s (not in the shipped kernel cache)", name)
        STATS.compiled[name] += 1
        STATS.keys[self.key] = "compiled"
        return str(super().put_group(filename, group))


def _shipped_group(keydir: Path, filename: str) -> dict[str, str] | None:
    try:
        data = json.loads((keydir / f"__grp__{filename}").read_text())
    except (OSError, ValueError):
        return None
    out = {}
    for child, path in (data.get("child_paths") or {}).items():
        p = keydir / Path(path).name
        if not p.exists():
            return None
        out[child] = str(p)
    return out or None


def activate(shipped: Path | None, cache_dir: Path | None = None) -> None:
    """Route Triton's cache through `ShippedCacheManager` (shipped dir first, if it exists)."""
    _SHIPPED.clear()
    if shipped is not None and shipped.is_dir():
        _SHIPPED.append(shipped)
    triton.knobs.cache.manager_class = ShippedCacheManager
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        triton.knobs.cache.dir = str(cache_dir)


class _Driver:
    """Compile-only stand-in for Triton's active driver: a target, no device, no launches."""

    def __init__(self, target: GPUTarget) -> None:
        self.target = target

    def get_current_device(self) -> str:
        return STANDIN_DEVICE

    def set_current_device(self, device: object) -> None:
        pass

    def get_current_stream(self, device: object = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return self.target

    def is_active(self) -> bool:
        return True


def _warm_run(orig: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: JITFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        return orig(self, *args, grid=grid, warmup=True, **kwargs)

    return run


def _getitem(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Tensor indexing for fake "cuda" tensors on a CPU-only torch, whose indexing path asks
    for a CUDA device guard: the view is taken on a meta twin and re-made with as_strided."""

    def getitem(self: torch.Tensor, idx: Any) -> Any:
        try:
            return orig(self, idx)
        except RuntimeError as e:
            if "not linked with support for cuda" not in str(e):
                raise
        twin = torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device="meta")
        v = orig(twin, idx)
        return self.as_strided(v.shape, v.stride(), self.storage_offset() + v.storage_offset())

    return getitem


def _launcher_modules() -> list[Any]:
    import paro_kernels.triton as pkg

    names = [m for m in list(sys.modules) if m.startswith(pkg.__name__ + ".")]
    return [sys.modules[m] for m in names if sys.modules[m] is not None]


def _loaded_kernel_names() -> set[str]:
    """The names of the Triton kernels of the loaded `paro_kernels.triton` modules."""
    return {
        v.fn.__name__
        for m in _launcher_modules()
        for v in vars(m).values()
        if isinstance(v, JITFunction)
    }


@contextlib.contextmanager
def standin(chip: Chip) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
    """Compile-only context for `chip`; yields `fake(t)`: t's twin as a fake "cuda" tensor."""
    from torch._library.custom_ops import CustomOpDef
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton.runtime.driver import driver

    import paro_kernels.triton.mx_ops
    import paro_kernels.triton.ops  # noqa: F401

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    prev = driver._active
    driver.set_active(_Driver(chip.target))  # type: ignore[arg-type]
    patch(JITFunction, "run", _warm_run(JITFunction.run))
    patch(torch.Tensor, "__getitem__", _getitem(torch.Tensor.__getitem__))
    patch(torch.version, "hip", "precompile" if chip.hip else None)
    for m in _launcher_modules():
        if hasattr(m, "sm_count"):
            patch(m, "sm_count", lambda _device, s=chip.sms: s)
        if hasattr(m, "is_hip"):
            patch(m, "is_hip", lambda h=chip.hip: h)
        for n, v in list(vars(m).items()):
            if isinstance(v, CustomOpDef):
                patch(m, n, v._init_fn)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*data pointer of FakeTensor.*")
            with mode:
                yield lambda t: torch.empty_strided(
                    t.shape, t.stride(), dtype=t.dtype, device="cuda"
                )
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
        driver._active = prev
        for m in _launcher_modules():
            for v in vars(m).values():
                if isinstance(v, JITFunction):
                    v.device_caches.pop(STANDIN_DEVICE, None)  # type: ignore[attr-defined]


def fake_like(obj: Any, fake: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """obj with every tensor (dataclass fields, tuples, lists) replaced by `fake(tensor)`."""
    if isinstance(obj, torch.Tensor):
        return fake(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: fake_like(getattr(obj, f.name), fake) for f in fields(obj)})
    if isinstance(obj, tuple | list):
        return type(obj)(fake_like(v, fake) for v in obj)
    return obj


Call = Callable[[Callable[[torch.Tensor], torch.Tensor]], object]


@dataclass(frozen=True)
class WalkResult:
    """What one walk needed: each cache key with its kernel and where it came from."""

    keys: dict[str, str]  # key -> "shipped" | "compiled" | "local"
    names: dict[str, str]  # key -> kernel name
    seconds: float

    def count(self, where: str) -> int:
        """How many distinct specializations came from `where`."""
        return sum(1 for v in self.keys.values() if v == where)


def walk(
    chip: Chip, calls: Iterable[Call], cache_dir: Path, shipped: Path | None = None
) -> WalkResult:
    """Run each call (given `fake`) under the stand-in: every launch it makes is compiled into
    (or found in) the cache; returns the distinct keys it needed."""
    saved_dir, saved_cls, saved_shipped = (
        triton.knobs.cache.dir,
        triton.knobs.cache.manager_class,
        list(_SHIPPED),
    )
    names: dict[str, str] = {}

    class _Naming(ShippedCacheManager):
        def get_group(self, filename: str) -> dict[str, str] | None:
            names[self.key] = _name(filename)
            return super().get_group(filename)

    before = dict(STATS.keys)
    STATS.keys.clear()
    t0 = time.monotonic()
    try:
        activate(shipped, cache_dir)
        triton.knobs.cache.manager_class = _Naming
        with standin(chip) as fake:
            for call in calls:
                call(fake)
        keys = dict(STATS.keys)
    finally:
        triton.knobs.cache.dir, triton.knobs.cache.manager_class = saved_dir, saved_cls
        _SHIPPED[:] = saved_shipped
        STATS.keys.clear()
        STATS.keys.update(before)
    return WalkResult(keys, {k: names[k] for k in keys}, time.monotonic() - t0)


@dataclass(frozen=True)
class Entry:
    """One compiled kernel in a cache directory."""

    key: str
    name: str
    target: str
    num_warps: int
    num_stages: int
    triton: str
    # From the AMDGCN's kernel metadata (-1 where the entry has none: the CUDA targets).
    vgprs: int = -1
    vgpr_spills: int = -1
    sgpr_spills: int = -1  # into VGPR lanes (v_writelane) unless scratch says otherwise
    scratch: int = -1  # private segment bytes a lane: spills that reach memory

    @property
    def waves_per_simd(self) -> int:
        """Waves of this kernel a gfx12 SIMD holds by VGPRs (1536 a lane, at most 16)."""
        return min(16, 1536 // self.vgprs) if self.vgprs > 0 else 0


def amdgcn_meta(asm: str, key: str) -> int:
    """One integer of an AMDGCN kernel's metadata (`.vgpr_count: 88`); 0 where it is absent."""
    m = re.search(rf"\.{key}:\s*(\d+)", asm)
    return int(m.group(1)) if m else 0


def _amdgcn_usage(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    text = path.read_text()
    keys = {"vgprs": "vgpr_count", "vgpr_spills": "vgpr_spill_count",
            "sgpr_spills": "sgpr_spill_count", "scratch": "private_segment_fixed_size"}  # fmt: skip
    return {field: amdgcn_meta(text, key) for field, key in keys.items()}


def inventory(cache_dir: Path) -> list[Entry]:
    """Every complete compiled kernel under cache_dir (a group file whose files all exist)."""
    out = []
    for grp in sorted(cache_dir.glob("*/__grp__*.json")):
        name = _name(grp.name)
        if _shipped_group(grp.parent, f"{name}.json") is None:
            continue
        meta = json.loads((grp.parent / f"{name}.json").read_text())
        tgt = meta.get("target", {})
        arch = tgt.get("arch") if isinstance(tgt, dict) else tgt
        out.append(Entry(grp.parent.name, name, f"{tgt.get('backend', '?')}:{arch}",
                         int(meta.get("num_warps", 0)), int(meta.get("num_stages", 0)),
                         str(meta.get("triton_version", "?")),
                         **_amdgcn_usage(grp.parent / f"{name}.amdgcn")))  # fmt: skip
    return out


def spills(entries: Iterable[Entry]) -> list[str]:
    """The entries whose registers spill to memory (VGPR spills, scratch): one line each. SGPR
    spills into VGPR lanes stay on chip and are not listed (the inventory reports them)."""
    return [
        f"{e.name} {e.key} ({e.target}): {e.vgpr_spills} VGPRs spilled, {e.scratch} B of scratch"
        for e in entries
        if e.vgpr_spills > 0 or e.scratch > 0
    ]


def missing(cache_dir: Path, needed: Iterable[str]) -> list[str]:
    """The needed keys that cache_dir does not hold complete."""
    have = {e.key for e in inventory(cache_dir)}
    return sorted(set(needed) - have)


def write_manifest(cache_dir: Path, chip: Chip, result: WalkResult, extra: dict[str, Any]) -> Path:
    """The build's record beside the cache: target, Triton version, every needed key by name."""
    path = cache_dir / MANIFEST
    from triton._C.libtriton import get_cache_invalidating_env_vars

    data = {
        "target": chip.name, "triton": triton.__version__, "triton_key": triton_key_sha(),
        # Part of every key: a serve whose environment sets others misses every entry.
        "env_vars": dict(get_cache_invalidating_env_vars()),
        "seconds": round(result.seconds, 1),
        "keys": {k: result.names[k] for k in sorted(result.keys)}, **extra,
    }  # fmt: skip
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def triton_key_sha() -> str:
    """sha256 of this Triton's `triton_key()` (its sources and libtriton): a cache's identity."""
    import hashlib

    from triton.runtime import cache

    return hashlib.sha256(cache.triton_key().encode()).hexdigest()


def read_manifest(cache_dir: Path) -> dict[str, Any]:
    """The manifest `write_manifest` left ({} when absent)."""
    try:
        data = json.loads((cache_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
