"""Profile loading and validation: the shipped profiles, and bad ones with their exact messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl.errors import ProfileError
from paroctl.profile import knobs, profiles
from paroctl.serve.plan import ServePlan

GOOD_BODY = """\
description: test profile
extends: _r9700
model:
  path: M
  served_names: [m]
"""


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def _problems(directory: Path, name: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        profiles.load(name, directory)
    return info.value.problems


def test_all_shipped_profiles_validate() -> None:
    loaded = {p.name: p for p in profiles.load_all()}
    assert set(loaded) == {
        "paro-int4",
        "paro-int5",
        "paro-mxfp4",
        "nvfp4",
        "fp8-ref",
        "bf16-ref",
        "cpu-demo",
        "cpu-demo-alt",
        "cpu-demo-paro",
        "cpu-demo-int5",
        "cpu-demo-mxfp4",
        "cpu-demo-nvfp4",
        "cpu-demo-docker",
    }
    int5 = loaded["paro-int5"]
    assert int5.body.serve.max_model_len == 262144
    assert int5.body.serve.speculative is not None
    assert int5.body.serve.speculative.num_speculative_tokens == 7
    assert int5.knobs["PARO_ACT_FORMAT"] == "int8"
    assert int5.knobs["PARO_ZP_EPILOGUE"] == "1"


def test_every_registered_knob_is_forwarded_with_profile_value_or_default() -> None:
    registry = knobs.load_registry()
    for prof in profiles.load_all():
        env = ServePlan.of(prof).env
        for name, knob in registry.knobs.items():
            expected = prof.body.knobs.get(name)
            value = env[name]
            assert value, f"{prof.name}: {name} empty"
            if expected is None:
                assert value == knob.default
        assert all(v != "" for v in env.values())


@pytest.mark.parametrize(
    ("gpus", "rocr", "hip"), [([0, 1], "0,1", "0,1"), ([1], "1", "0"), ([2, 3], "2,3", "0,1")]
)
def test_hip_devices_index_into_the_rocr_list(
    profile_dir: Path, gpus: list[int], rocr: str, hip: str
) -> None:
    extra = f"box:\n  gpus: {gpus}\nserve:\n  tensor_parallel_size: 1\n"
    _write(profile_dir, "t", GOOD_BODY + extra)
    env = ServePlan.of(profiles.load("t", profile_dir)).env
    assert (env["ROCR_VISIBLE_DEVICES"], env["HIP_VISIBLE_DEVICES"]) == (rocr, hip)


def test_cache_dir_is_per_variant_and_keyed_on_graph_knobs(profile_dir: Path) -> None:
    _write(profile_dir, "a", GOOD_BODY)
    _write(profile_dir, "b", GOOD_BODY)
    _write(profile_dir, "c", GOOD_BODY + "knobs:\n  PARO_ACT_FORMAT: int8\n")
    _write(profile_dir, "d", GOOD_BODY + "knobs:\n  PARO_NVFP4_EXP: ocp\n")
    dirs = {n: ServePlan.of(profiles.load(n, profile_dir)).layout for n in "abcd"}
    assert dirs["a"].cache_dir.endswith(f"/compile/a-{dirs['a'].cache_key}")
    assert dirs["a"].cache_key == dirs["b"].cache_key  # same content, still not the same dir
    assert dirs["a"].cache_dir != dirs["b"].cache_dir
    assert dirs["c"].cache_key != dirs["a"].cache_key  # graph-changing knob
    assert dirs["d"].cache_key == dirs["a"].cache_key  # load-time only knob


def test_shipped_variants_never_share_a_cache_dir() -> None:
    dirs = [ServePlan.of(p).layout.cache_dir for p in profiles.load_all()]
    assert len(set(dirs)) == len(dirs)


BAD = [
    (
        "unknown top-level key",
        GOOD_BODY + "servee:\n  port: 1\n",
        ["{dir}/bad.yaml: servee: unknown key"],
    ),
    (
        "misspelt nested key",
        GOOD_BODY + "serve:\n  max_model_lenn: 4096\n",
        ["{dir}/bad.yaml: serve.max_model_lenn: unknown key"],
    ),
    (
        "unknown knob, with a suggestion",
        GOOD_BODY + "knobs:\n  PARO_ACT_FORMT: int8\n",
        [
            "{dir}/bad.yaml: knobs.PARO_ACT_FORMT: unknown knob (not in knobs.yaml); "
            "did you mean PARO_ACT_FORMAT?"
        ],
    ),
    (
        "empty knob",
        GOOD_BODY + "knobs:\n  PARO_ACT_FORMAT: ''\n",
        [
            "{dir}/bad.yaml: knobs.PARO_ACT_FORMAT: empty value (VAR= is set-but-empty, not unset); "
            "remove the key for the default"
        ],
    ),
    (
        "knob value outside its enum",
        GOOD_BODY + "knobs:\n  PARO_ACT_FORMAT: fp4\n",
        ["{dir}/bad.yaml: knobs.PARO_ACT_FORMAT: expected one of fp8, int8, bf16; got 'fp4'"],
    ),
    (
        "int knob out of range",
        GOOD_BODY + "knobs:\n  PARO_DECODE_MAX_M: 500\n",
        ["{dir}/bad.yaml: knobs.PARO_DECODE_MAX_M: expected an integer in [1, 128], got 500"],
    ),
    (
        "bool knob given a word",
        GOOD_BODY + "knobs:\n  PARO_ZP_EPILOGUE: yes please\n",
        ["{dir}/bad.yaml: knobs.PARO_ZP_EPILOGUE: expected '0' or '1', got 'yes please'"],
    ),
    (
        "wrong scalar type",
        GOOD_BODY + "serve:\n  max_model_len: lots\n",
        ["{dir}/bad.yaml: serve.max_model_len: Input should be a valid integer; got 'lots'"],
    ),
    (
        "enum setting",
        GOOD_BODY + "serve:\n  mode: fast\n",
        ["{dir}/bad.yaml: serve.mode: Input should be 'prod' or 'eval'; got 'fast'"],
    ),
    (
        "derived GPU variable in env",
        GOOD_BODY + "env:\n  HIP_VISIBLE_DEVICES: '0'\n",
        [
            "{dir}/bad.yaml: env.HIP_VISIBLE_DEVICES: derived by paroctl (from box.gpus / the cache "
            "dir); remove it"
        ],
    ),
    (
        "empty env value",
        GOOD_BODY + "env:\n  NCCL_DEBUG: ''\n",
        ["{dir}/bad.yaml: env.NCCL_DEBUG: empty value (VAR= is set-but-empty, not unset)"],
    ),
    (
        "plugin knob in env",
        GOOD_BODY + "env:\n  PARO_ACT_FORMAT: int8\n",
        ["{dir}/bad.yaml: env.PARO_ACT_FORMAT: plugin knobs belong in the `knobs` section"],
    ),
    (
        "numerics check in prod",
        GOOD_BODY + "knobs:\n  PARO_NUMERICS_CHECK: all\n",
        [
            "{dir}/bad.yaml: knobs.PARO_NUMERICS_CHECK: must be off in prod mode (an eval-boot tool: "
            "its fp64 reference OOM'd a prod worker, seed log 'Traps hit'); use serve.mode: eval"
        ],
    ),
    (
        "tensor parallel beyond the GPUs",
        GOOD_BODY + "serve:\n  tensor_parallel_size: 4\n",
        ["{dir}/bad.yaml: serve.tensor_parallel_size: expected <= 2 (the GPUs in box.gpus), got 4"],
    ),
    (
        "managed flag in extra_args",
        GOOD_BODY + "serve:\n  extra_args: ['--max-model-len=4096']\n",
        [
            "{dir}/bad.yaml: serve.extra_args: --max-model-len is set through serve.max_model_len, "
            "not extra_args"
        ],
    ),
    (
        "repeated served names",
        GOOD_BODY.replace("[m]", "[m, m]"),
        ["{dir}/bad.yaml: model.served_names: served names repeat; got ['m', 'm']"],
    ),
    (
        "missing required key",
        "description: x\nextends: _r9700\n",
        ["{dir}/bad.yaml: model: required key is missing"],
    ),
    (
        "every problem at once",
        GOOD_BODY + "servee: 1\nknobs:\n  PARO_NOPE: '1'\nenv:\n  NCCL_DEBUG: ''\n",
        [
            "{dir}/bad.yaml: env.NCCL_DEBUG: empty value (VAR= is set-but-empty, not unset)",
            "{dir}/bad.yaml: knobs.PARO_NOPE: unknown knob (not in knobs.yaml)",
            "{dir}/bad.yaml: servee: unknown key",
        ],
    ),
    (
        "invalid YAML",
        "description: [unclosed\n",
        [
            "{dir}/bad.yaml: invalid YAML at line 2, column 1: expected ',' or ']', but got "
            "'<stream end>'"
        ],
    ),
    ("not a mapping", "- a\n- b\n", ["{dir}/bad.yaml: expected a mapping of keys, got list"]),
    (
        "missing base",
        "extends: _nowhere\n",
        [
            "{dir}/bad.yaml: extends: no such base profile '_nowhere' (looked for {dir}/_nowhere.yaml)"
        ],
    ),
]


@pytest.mark.parametrize(("case", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_profiles_give_exact_messages(
    profile_dir: Path, case: str, text: str, expected: list[str]
) -> None:
    _write(profile_dir, "bad", text)
    assert _problems(profile_dir, "bad") == [e.format(dir=profile_dir) for e in expected]


def test_extends_cycle(profile_dir: Path) -> None:
    _write(profile_dir, "_a", "extends: _b\n")
    _write(profile_dir, "_b", "extends: _a\n")
    _write(profile_dir, "bad", "extends: _a\n")
    assert _problems(profile_dir, "bad") == [
        f"{profile_dir}/bad.yaml: extends: cycle bad -> _a -> _b -> _a"
    ]


def test_error_in_a_base_names_the_base_file(profile_dir: Path) -> None:
    base = (profile_dir / "_r9700.yaml").read_text()
    _write(profile_dir, "_box", base + "knobs:\n  PARO_X: '1'\n")
    _write(profile_dir, "bad", GOOD_BODY.replace("_r9700", "_box"))
    assert _problems(profile_dir, "bad") == [
        f"{profile_dir}/_box.yaml: knobs.PARO_X: unknown knob (not in knobs.yaml) "
        "(inherited by bad.yaml)"
    ]


def test_null_deletes_an_inherited_key(profile_dir: Path) -> None:
    _write(profile_dir, "t", GOOD_BODY + "serve:\n  speculative: null\n")
    assert profiles.load("t", profile_dir).body.serve.speculative is None


def test_unknown_profile_lists_known_ones(profile_dir: Path) -> None:
    _write(profile_dir, "t", GOOD_BODY)
    assert _problems(profile_dir, "nope") == [
        f"{profile_dir}/nope.yaml: no such profile (known: t)"
    ]


def test_load_all_reports_problems_of_every_file(profile_dir: Path) -> None:
    _write(profile_dir, "x", GOOD_BODY + "a: 1\n")
    _write(profile_dir, "y", GOOD_BODY + "b: 1\n")
    with pytest.raises(ProfileError) as info:
        profiles.load_all(profile_dir)
    assert info.value.problems == [
        f"{profile_dir}/x.yaml: a: unknown key",
        f"{profile_dir}/y.yaml: b: unknown key",
    ]


def test_vllm_env_names_are_checked_where_vllm_declares_them(
    profile_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = tmp_path / "envs.py"
    # The shape of vllm/envs.py: a dict literal of name -> lambda.
    envs.write_text(
        "environment_variables = {\n  'VLLM_CPU_KVCACHE_SPACE': lambda: 0,\n"
        "  'VLLM_USE_V1': lambda: 1,\n}\n"
    )
    monkeypatch.setenv("PAROCTL_VLLM_ENVS", str(envs))
    _write(profile_dir, "bad", GOOD_BODY + "env:\n  VLLM_CPU_KVCACHE_SPAC: '2'\n")
    assert _problems(profile_dir, "bad") == [
        f"{profile_dir}/bad.yaml: env.VLLM_CPU_KVCACHE_SPAC: vLLM does not declare this variable "
        "(vllm.envs); did you mean VLLM_CPU_KVCACHE_SPACE?"
    ]
    _write(profile_dir, "good", GOOD_BODY + "env:\n  VLLM_CPU_KVCACHE_SPACE: '2'\n")
    assert profiles.load("good", profile_dir).env == {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
