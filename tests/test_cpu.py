"""The CPU decision (dtype, engine cores, KV space) as a pure function over CPU-flag fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import cpu
from paroctl.serve.plan import ServePlan, plan_for

GIB = 1 << 30
# The flags lines of the two CPU kinds CI has run on (lscpu, 2026-12-01), trimmed to the x86
# vector extensions the decision reads; the rest of each line is noise to it.
EPYC_AVX2 = "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 vaes vpclmulqdq"
EPYC_AVX512_BF16 = EPYC_AVX2 + " avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni"
SAPPHIRE_AMX = EPYC_AVX512_BF16 + " amx_bf16 amx_tile amx_int8"
SKYLAKE_AVX512 = EPYC_AVX2 + " avx512f avx512dq avx512bw avx512vl"


def facts(flags: str, cores: int = 2, mem_gib: float = 23.0) -> cpu.CpuFacts:
    return cpu.CpuFacts(frozenset(flags.split()), cores, int(mem_gib * GIB), "fixture")


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        pytest.param(EPYC_AVX2, "float32", id="epyc-avx2"),
        # AVX-512 without its bf16 extension: bf16 matmul is still emulated
        pytest.param(SKYLAKE_AVX512, "float32", id="avx512-no-bf16"),
        pytest.param(EPYC_AVX512_BF16, "bfloat16", id="epyc-avx512-bf16"),
        pytest.param(SAPPHIRE_AMX, "bfloat16", id="amx"),
        pytest.param("", "float32", id="no-flags"),  # unreadable: what every CPU computes fast
    ],
)
def test_bf16_only_where_the_cpu_has_bf16_instructions(flags: str, dtype: str) -> None:
    plan = cpu.decide(facts(flags))
    assert plan.dtype == dtype
    why = "avx512_bf16 from fixture" if dtype == "bfloat16" else "no avx512_bf16/amx_bf16"
    assert why in plan.dtype_why


def test_an_explicit_profile_dtype_wins() -> None:
    plan = cpu.decide(facts(EPYC_AVX2), dtype="bfloat16")
    assert (plan.dtype, plan.dtype_why) == ("bfloat16", "set by the profile")
    assert cpu.decide(facts(EPYC_AVX512_BF16), dtype="auto").dtype == "bfloat16"


@pytest.mark.parametrize(("cores", "reserved"), [(1, 0), (2, 0), (4, 0), (7, 0), (8, 1), (64, 1)])
def test_small_boxes_give_the_engine_every_core(cores: int, reserved: int) -> None:
    plan = cpu.decide(facts(EPYC_AVX2, cores=cores))
    assert (plan.cores, plan.reserved) == (cores, reserved)


def test_a_profile_reservation_wins_but_never_takes_the_last_core() -> None:
    assert cpu.decide(facts(EPYC_AVX2, cores=16), reserved="0").reserved == 0
    assert cpu.decide(facts(EPYC_AVX2, cores=2), reserved="4").reserved == 1


@pytest.mark.parametrize(("mem_gib", "kv"), [(0.5, "1"), (23.0, "2"), (128.0, "16"), (2048, "64")])
def test_kv_space_is_an_eighth_of_available_memory_within_bounds(mem_gib: float, kv: str) -> None:
    assert cpu.decide(facts(EPYC_AVX2, mem_gib=mem_gib)).kv_gib == kv


def test_a_profile_kv_space_wins_verbatim() -> None:
    assert cpu.decide(facts(EPYC_AVX2), kv_gib="2.5").kv_gib == "2.5"


def test_parse_proc_files() -> None:
    cpuinfo = f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {EPYC_AVX2}\n\nprocessor\t: 1\n"
    assert "avx2" in cpu.parse_flags(cpuinfo) and "avx512f" not in cpu.parse_flags(cpuinfo)
    assert cpu.parse_flags("processor: 0\n") == frozenset()
    assert cpu.parse_mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2 << 20
    assert cpu.parse_mem_available("") == 0


def test_detect_reads_this_machine_and_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cpu.detect()
    assert real.cores >= 1 and real.mem_available > 0 and real.source == "/proc/cpuinfo"
    assert real.flags == cpu.parse_flags(Path("/proc/cpuinfo").read_text())
    monkeypatch.setenv(cpu.FLAGS_ENV, "avx2 avx512_bf16")
    forced = cpu.detect()
    assert forced.flags == {"avx2", "avx512_bf16"} and forced.source == f"${cpu.FLAGS_ENV}"
    assert cpu.decide(forced).dtype == "bfloat16"


def test_apply_sets_the_serve_argv_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu.FLAGS_ENV, EPYC_AVX2)
    profile = profiles.load("cpu-demo")
    plan = cpu.plan_for(profile, facts(EPYC_AVX2, cores=2))
    assert plan is not None
    served = cpu.apply(profile, plan)
    argv = ServePlan.of(served).argv
    assert argv[argv.index("--dtype") + 1] == "float32"
    env = ServePlan.of(served).env
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert served.hash == profile.hash  # the same profile, served the way this machine can
    assert "--dtype" not in ServePlan.of(profile).argv  # the unresolved profile stays as written
    resolved = plan_for(profile)  # the plan of an operation carries the decision it applied
    assert resolved.cpu is not None and "--dtype" in resolved.argv
    assert resolved.env[cpu.KV_ENV] == resolved.cpu.kv_gib


def test_gpu_profiles_get_no_cpu_plan() -> None:
    profile = profiles.load("paro-int4")
    assert cpu.plan_for(profile) is None
    assert cpu.apply(profile, None) is profile


def test_summary_names_every_choice() -> None:
    line = cpu.decide(facts(EPYC_AVX2)).summary()
    assert line.startswith("cpu: dtype float32 (no avx512_bf16/amx_bf16 in fixture)")
    assert "engine on 2 of 2 cores" in line and "KV 2 GiB" in line


def test_log_problems_read_vllms_own_lines() -> None:
    plan = cpu.decide(facts(EPYC_AVX2))
    good = [
        "(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
        "config: model='/m', dtype=torch.float32, max_seq_len=2048,",
        "(EngineCore pid=1) INFO [ompmultiprocessing.py:185] \tlocal_world_size=1, "
        "reserve_cpu_num=0\r",
    ]
    assert cpu.log_problems(plan, good) == []
    bf16 = [good[0].replace("float32", "bfloat16"), good[1].replace("=0", "=1")]
    assert cpu.log_problems(plan, bf16) == [
        "the engine runs dtype ['bfloat16'], not float32",
        "reserve_cpu_num ['1'] in the log, not 0",
    ]
    assert len(cpu.log_problems(plan, [])) == 2


def test_unit_render_and_install_show_this_machines_decision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from paroctl.cli.main import cli
    from paroctl.serve.runtime import systemd

    monkeypatch.setenv(cpu.FLAGS_ENV, EPYC_AVX512_BF16)
    out = CliRunner().invoke(cli, ["unit", "render", "cpu-demo", "--format", "all"]).output
    plan = cpu.decide(cpu.detect())
    assert "--dtype bfloat16" in out and f"VLLM_CPU_NUM_OF_RESERVED_CPU={plan.reserved}" in out
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path))
    files = dict(
        (p.name, t)
        for p, t, _ in systemd.plan_install(
            plan_for(profiles.load("cpu-demo")), "service", reload=False
        ).files
    )
    assert "--dtype bfloat16" in files["paroctl-cpu-demo.service"]
    assert f"VLLM_CPU_KVCACHE_SPACE={plan.kv_gib}" in files["cpu-demo.env"]
    # A GPU profile renders exactly as written.
    gpu = CliRunner().invoke(cli, ["unit", "render", "paro-int4", "--format", "env"]).output
    assert "VLLM_CPU_" not in gpu
