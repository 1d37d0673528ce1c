"""register(): idempotent, ours wins over an earlier `paroquant`, a later one fails the boot."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

pytest.importorskip("vllm")

import paro_vllm
from paro_vllm import _vllm_compat as compat
from paro_vllm.paroquant import ParoQuantConfig

GROUP = compat.GENERAL_PLUGINS_GROUP
OURS = EntryPoint("paro", "paro_vllm:register", GROUP)
UPSTREAM = EntryPoint("paroquant", "paroquant.vllm_plugin:register", GROUP)
OTHER = EntryPoint("other", "other_plugin:register", GROUP)


def _registered() -> type:
    from vllm.model_executor.layers.quantization import get_quantization_config

    return get_quantization_config("paroquant")


def test_register_is_idempotent() -> None:
    paro_vllm.register()
    paro_vllm.register()
    assert _registered() is ParoQuantConfig


def test_ours_replaces_an_earlier_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    class Upstream(compat.QuantizationConfig):  # stands in for z-lab's class; never built
        pass

    compat.register_config("paroquant", Upstream)
    assert _registered() is Upstream
    monkeypatch.setattr(paro_vllm, "_registered", False)
    paro_vllm.register()
    assert _registered() is ParoQuantConfig


def test_upstream_plugin_after_ours_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert compat.foreign_plugins_after_ours([OURS, OTHER, UPSTREAM]) == [
        "paroquant = paroquant.vllm_plugin:register"
    ]
    assert compat.foreign_plugins_after_ours([UPSTREAM, OURS, OTHER]) == []
    monkeypatch.setenv("VLLM_PLUGINS", "paro")  # upstream not enabled: never runs
    assert compat.foreign_plugins_after_ours([OURS, UPSTREAM]) == []


def test_late_upstream_fails_the_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    real = compat.foreign_plugins_after_ours
    monkeypatch.setattr(compat, "foreign_plugins_after_ours", lambda: real([OURS, UPSTREAM]))
    monkeypatch.setattr(paro_vllm, "_registered", False)
    with pytest.raises(RuntimeError, match="set VLLM_PLUGINS=paro or uninstall"):
        paro_vllm.register()
    monkeypatch.setattr(paro_vllm, "_registered", True)


def test_entry_point_is_installed() -> None:
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group=GROUP) if ep.value == "paro_vllm:register"]
    assert [ep.name for ep in eps] == ["paro"]
