"""paro-vllm: a vLLM general plugin serving z-lab ParoQuant checkpoints (and its knob registry).

`import paro_vllm` is cheap (no torch, no vLLM); vLLM calls `register()` in every process it
starts, and only then is vLLM imported.
"""

from __future__ import annotations

import logging
import sys

from ._version import __version__

_registered = False


def _setup_logging(level: str) -> None:
    log = logging.getLogger("paro_vllm")
    if not log.handlers:  # idempotent: register() runs once per process, tests call it again
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [paro_vllm] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level.upper())


def register() -> None:
    """vLLM entry point: register the `paroquant` method (idempotent, imports vLLM lazily).

    Fails the boot when an upstream z-lab `paroquant` plugin would register after us and so
    silently replace our method (ledger L1 in `_vllm_compat`).
    """
    global _registered
    if _registered:
        return
    from .knobs import read_env

    knobs = read_env()  # a bad PARO_* environment fails the boot here, in every process
    _setup_logging(knobs["PARO_LOG_LEVEL"])
    from . import _vllm_compat as compat

    late = compat.foreign_plugins_after_ours()
    if late:
        raise RuntimeError(
            f"paro-vllm: upstream ParoQuant plugin(s) {late} would register 'paroquant' after "
            "paro-vllm and replace it; set VLLM_PLUGINS=paro or uninstall the upstream package"
        )
    from .paroquant import METHOD, ParoQuantConfig

    compat.register_config(METHOD, ParoQuantConfig)
    from . import nvfp4_mxfp4, paroquant_mxfp4

    compat.register_config(paroquant_mxfp4.METHOD, paroquant_mxfp4.ParoMxfp4Config)
    compat.register_config(nvfp4_mxfp4.METHOD, nvfp4_mxfp4.NvFp4MxFp4Config)
    from . import kernel_cache

    kernel_cache.activate()  # the image's precompiled kernels, where it ships them
    _registered = True
    logging.getLogger("paro_vllm").debug(
        "paro-vllm %s registered %r on vLLM %s", __version__, METHOD, compat.vllm_version()
    )
