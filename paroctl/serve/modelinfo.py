"""vLLM's model-info cache, shared between a box's serve caches.

Before it loads a model, vLLM inspects the model's class: from `$VLLM_CACHE_ROOT/modelinfos/*.json`
when a file there matches the hash of the class's source, else in a subprocess that imports vLLM
and torch once more (measured on the CPU demo, 2-core AVX2 EPYC: a boot 55-63 s with the file,
78-81 s without). Each compile-cache key has its own VLLM_CACHE_ROOT, so every new profile, knob
change or fresh PAROCTL_HOME paid that subprocess on its first boot. The files depend only on the
vLLM installation, so paroctl keeps one seed per installation (the image, or the entrypoint's
interpreter) under PAROCTL_CACHE: a boot is seeded from it, and a verified boot adds what its vLLM
wrote. vLLM checks each file's hash itself and redoes a stale one, so a seed can cost a
subprocess, never a wrong answer. A cache: any OS error here is ignored (the boot then inspects
as before).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from paroctl import state
from paroctl.profile.profiles import expand
from paroctl.serve.plan import ServePlan

SUBDIR = "modelinfos"  # vLLM's directory under VLLM_CACHE_ROOT


def cache_dirs(plan: ServePlan) -> tuple[Path, Path]:
    """(the serve's model-info directory on this host, its installation's seed). VLLM_CACHE_ROOT
    is always paroctl's (plan.env; a profile may not set it)."""
    body = plan.profile.body
    install = body.image.ref if body.image else expand(body.serve.entrypoint[0])
    key = hashlib.sha256(install.encode()).hexdigest()[:16]
    return (
        Path(plan.layout.cache_dir) / "vllm" / SUBDIR,
        state.cache_dir() / "vllm-modelinfos" / key,
    )


def seed_cache(plan: ServePlan) -> int:
    """Copy the seed's files the serve's cache lacks into it; return how many were copied."""
    serve_dir, seed_dir = cache_dirs(plan)
    return _copy_new(seed_dir, serve_dir, changed=False)


def keep_boot(plan: ServePlan) -> int:
    """Add the files a verified boot's vLLM wrote (new or changed) to the seed; return how many."""
    serve_dir, seed_dir = cache_dirs(plan)
    return _copy_new(serve_dir, seed_dir, changed=True)


def _copy_new(src: Path, dst: Path, *, changed: bool) -> int:
    """Copy src's *.json files that dst lacks (or, with changed, holds with other bytes)."""
    copied = 0
    try:
        entries = [p for p in src.iterdir() if p.suffix == ".json" and not p.is_symlink()]
    except OSError:
        return 0
    for path in entries:
        target = dst / path.name
        try:
            data = path.read_bytes()
            if target.exists() and (not changed or target.read_bytes() == data):
                continue
            state.atomic_write(target, data, durable=False)  # a cache: no fsync
            copied += 1
        except OSError:
            continue
    return copied
