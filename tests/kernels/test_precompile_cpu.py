"""The gfx1201 kernel cache built on CPU (Triton's own layout) and checked for completeness.

One build per session (~25 s here: about six gfx1201 compiles): SmolLM2-135M's qkv projection
(the CPU demo's model: K = 576, partitions 576/192/192, G = 64) at M = 1..16 with the registry's
activation knobs (fp8, per-group in the decode band), which visits every int specialization
class of M (== 1, % 16 == 0, other). A removed entry must fail both checks: the doctor's
(manifest against inventory) and the walk's (`kernel_cache.check`).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin"))

from paro_kernels.triton import precompile
from paro_vllm import kernel_cache as kc

PLAN = {
    "name": "smollm2-qkv",
    "ms": list(range(1, 17)),
    "knobs": {},
    "layers": [{"method": "paroquant", "sizes": [576, 192, 192], "k": 576, "group_size": 64}],
}


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("kc") / "gfx1201"
    t0 = time.monotonic()
    summary = kc.build([kc.Plan.from_json(PLAN)], "gfx1201", out)
    print(f"\ngfx1201 kernel cache build: {summary} in {time.monotonic() - t0:.1f} s")
    return {"cache": out, "summary": summary}


def test_build_holds_every_config_the_launcher_picks(built: dict[str, Any]) -> None:
    cache = built["cache"]
    entries = precompile.inventory(cache)
    manifest = precompile.read_manifest(cache)
    assert {e.target for e in entries} == {"hip:gfx1201"}
    assert {e.name for e in entries} == {"rotate_quant_kernel", "w4a8_gemm_kernel"}
    assert len(entries) == len(manifest["keys"]) == built["summary"]["keys"] >= 4
    assert manifest["triton_key"] == precompile.triton_key_sha()
    assert precompile.missing(cache, manifest["keys"]) == []
    assert kc.check([kc.Plan.from_json(PLAN)], "gfx1201", cache) == []


def test_every_shipped_kernel_is_spill_free_with_its_waves(built: dict[str, Any]) -> None:
    # On what the launcher really picks (not a hand-picked config): the
    # build reads each gfx1201 kernel's AMDGCN metadata. No VGPR or SGPR spill and no scratch in
    # any; 8+ waves a SIMD (Triton 3.9: rotate_quant 81 VGPRs, the W4A8 GEMM 116). Before its
    # weights' e4m3 were built from bits (2026-12-05) the GEMM's M = 2..16 specializations
    # spilled 27 SGPRs into VGPR lanes, around Triton's software e4m3 conversion.
    entries = precompile.inventory(built["cache"])
    assert entries and all(e.vgprs > 0 and e.vgpr_spills == 0 and e.scratch == 0 for e in entries)
    assert all(e.sgpr_spills == 0 for e in entries), entries
    assert precompile.spills(entries) == [] and built["summary"]["spills"] == []
    usage = built["summary"]["usage"]
    assert set(usage) == {"rotate_quant_kernel", "w4a8_gemm_kernel"}
    for name, u in usage.items():
        assert u["min_waves"] >= 8 and u["max_sgpr_spills"] == 0, (name, u)
        assert u["max_vgprs"] == max(e.vgprs for e in entries if e.name == name), (name, u)


def test_build_cli_reports_the_usage_and_exits_0_without_spills(
    built: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What the image's build step runs; over the built cache every kernel is already there.
    plan = tmp_path / "kernel-plan.json"
    plan.write_text(json.dumps({"targets": ["gfx1201"], "plans": [PLAN]}))
    assert kc.main(["build", "--plan", str(plan), "--root", str(built["cache"].parent)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["compiled"] == 0 and summary["spills"] == []
    assert summary["usage"] == built["summary"]["usage"]


def test_a_kernel_that_spills_to_memory_is_named() -> None:
    # The rule the image build fails on (kernel_cache build exits 1 and names the kernel).
    ok = precompile.Entry("K1", "w4a8_gemm_kernel", "hip:gfx1201", 4, 2, "3.9.0", 88, 0, 27, 0)
    bad = replace(ok, key="K2", vgpr_spills=2, scratch=12)
    assert precompile.spills([ok, bad]) == [
        "w4a8_gemm_kernel K2 (hip:gfx1201): 2 VGPRs spilled, 12 B of scratch"
    ]
    assert (ok.waves_per_simd, replace(ok, vgprs=256).waves_per_simd) == (16, 6)
    cuda = precompile.Entry("K3", "gemv_mma_kernel", "cuda:90", 4, 2, "3.9.0")
    assert cuda.waves_per_simd == 0 and precompile.spills([cuda]) == []


def test_a_removed_entry_fails_both_checks(built: dict[str, Any], tmp_path: Path) -> None:
    cache = tmp_path / "gfx1201"
    shutil.copytree(built["cache"], cache)
    keys = precompile.read_manifest(cache)["keys"]
    gone = sorted(keys)[0]
    shutil.rmtree(cache / gone)
    assert precompile.missing(cache, keys) == [gone]
    # the launcher's own walk finds the same hole (and compiles it into its scratch cache)
    assert kc.check([kc.Plan.from_json(PLAN)], "gfx1201", cache) == [f"{keys[gone]} {gone}"]


def test_keys_depend_on_m_classes_not_on_every_m(built: dict[str, Any]) -> None:
    # M = 2..15 share one specialization per kernel; 1 and 16 are their own (Triton's int rule).
    plan = kc.Plan.from_json({**PLAN, "ms": [3, 7, 11]})
    with_shipped = precompile.walk(
        precompile.CHIPS["gfx1201"], plan.calls(), built["cache"] / "scratch", built["cache"]
    )
    assert with_shipped.count("shipped") == 2 and with_shipped.count("compiled") == 0


def test_ms_cover_captures_and_both_sides_of_each_16_step() -> None:
    got = kc.ms(8, 64)
    assert got[:16] == list(range(1, 17)) and {32, 33, 48, 49, 64} <= set(got)
    assert 34 not in got and max(got) == 64
    assert kc.capture_sizes(24) == [1, 2, 4, 8, 16, 24]
    # a serve's own capture list (the marker's probe reads vLLM's) replaces the default one
    assert {24, 40} <= set(kc.ms(0, 64, [24, 40])) and 17 in kc.ms(0, 64, [24])


def test_image_doctor_prints_the_inventory_and_fails_on_a_missing_config(
    built: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], script: Any
) -> None:
    doctor = script("images/doctor.py")
    plan = tmp_path / "kernel-plan.json"
    plan.write_text(json.dumps({"targets": ["gfx1201"], "plans": [PLAN]}))
    root = tmp_path / "root"
    shutil.copytree(built["cache"], root / "gfx1201")
    report: dict[str, object] = {}
    assert doctor.kernel_cache(report, str(plan), str(root)) == []
    n = built["summary"]["keys"]
    assert report["kernel_cache"] == {
        "gfx1201": {"kernels": n, "needed": n, "by_name": {"rotate_quant_kernel": n // 2,
                                                           "w4a8_gemm_kernel": n // 2}}
    }  # fmt: skip
    assert f"kernel cache gfx1201: {n} kernels" in capsys.readouterr().out
    gone = sorted((root / "gfx1201").glob("*/__grp__w4a8_gemm_kernel.json"))[0].parent
    shutil.rmtree(gone)
    (problem,) = doctor.kernel_cache({}, str(plan), str(root))
    assert f"lacks 1 of the {n} launcher configs" in problem and gone.name in problem
    assert doctor.kernel_cache({}, str(tmp_path / "absent.json"), str(root)) == []  # cpu kind


def test_marker_probe_counts_this_process_layers(built: dict[str, Any], tmp_path: Path) -> None:
    layer = kc.Plan.from_json(PLAN).layers[0]
    kc.LAYERS.clear()
    try:
        assert kc.marker_field() == "kernels=precompiled:0 jit:0"  # no Triton layer
        kc.record(layer, kc._prep(layer), kc.Plan.from_json(PLAN).knobs)
        chip = precompile.CHIPS["gfx1201"]
        res = kc.probe(kc.LAYERS, kc.KNOBS, list(range(1, 17)), chip, built["cache"], tmp_path)
        assert (res.count("shipped"), len(res.keys)) == (built["summary"]["keys"],) * 2
        # an empty shipped cache: the probe compiles what is absent (jit:M), a second finds it
        # in the writable cache (a JIT of an earlier boot: still not shipped)
        res = kc.probe(kc.LAYERS, kc.KNOBS, [2], chip, tmp_path / "empty", tmp_path)
        assert (res.count("shipped"), res.count("compiled")) == (0, 2)
        res = kc.probe(kc.LAYERS, kc.KNOBS, [2], chip, tmp_path / "empty", tmp_path)
        assert (res.count("shipped"), res.count("local")) == (0, 2)
        assert kc.marker_field() == "kernels=unknown"  # no GPU here: the probe fails, logged
    finally:
        kc.LAYERS.clear()
