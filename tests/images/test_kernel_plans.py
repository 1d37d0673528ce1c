"""The kernel plan an image build compiles: the box profiles' layers, knobs and M buckets."""

from __future__ import annotations

import pytest

from paroctl.errors import RenderError
from paroctl.image import kernel_plans
from paroctl.profile import profiles


def test_rocm_plan_covers_every_triton_profile_of_the_box() -> None:
    plan = kernel_plans.image_plan("rocm", ("gfx1201",), profiles.load_all())
    assert plan["targets"] == ["gfx1201"]
    by_name = {p["name"]: p for p in plan["plans"]}
    # bf16-ref / fp8-ref serve unquantized checkpoints; the cpu-demo profiles are cpu images
    assert sorted(by_name) == ["nvfp4", "paro-int4", "paro-int5", "paro-mxfp4"]
    int4 = by_name["paro-int4"]
    # prod, 8 seqs x (1 + 7 draft tokens) x 2 = 128; the 8192-token prefill chunk
    assert (int4["max_capture"], int4["chunk"]) == (128, 8192)
    assert int4["knobs"]["PARO_ACT_FORMAT"] == "fp8" and int4["knobs"]["PARO_ACT_SCALE"] == "token"
    assert {tuple(x["sizes"]) for x in int4["layers"]} >= {(6144, 512, 512), (8704, 8704)}
    assert {x["bits"] for x in by_name["paro-int5"]["layers"]} == {5}
    assert {x["method"] for x in by_name["nvfp4"]["layers"]} == {"nvfp4_mxfp4"}


def test_a_profile_at_another_tp_than_the_shapes_is_refused() -> None:
    prof = profiles.load("paro-int4")
    serve = prof.body.serve.model_copy(update={"tensor_parallel_size": 1})
    body = prof.body.model_copy(update={"serve": serve})
    with pytest.raises(RenderError, match="TP=2, the profile serves TP=1"):
        kernel_plans.plan_for(prof.model_copy(update={"body": body}), kernel_plans.shapes_table())


def test_cuda_arch_maps_to_the_sm90_cache() -> None:
    assert kernel_plans.target("9.0") == "sm90"
    with pytest.raises(RenderError, match="no kernel-cache target"):
        kernel_plans.target("gfx90a")
