"""The profile schema: pydantic models of a profile file's sections, and the validated Profile.

Every model is frozen and forbids unknown keys (a misspelt key in an ops profile is an outage);
profiles.py loads files into them, resolves `extends:` and runs the cross-field checks.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from paroctl.profile import checks
from paroctl.profile.cluster import Cluster

# Upper bounds: generous for any real box, but finite, so a typo cannot ask systemd for a 10^30 s
# timeout or vLLM for 64-way TP.
MAX_TOKENS = 2**24
MAX_TIMEOUT_S = 86400
PosFloat = Annotated[float, Field(gt=0, le=1e9)]
Fraction = Annotated[float, Field(gt=0, le=1)]
NonEmpty = Annotated[str, Field(min_length=1, max_length=4096)]
# strict: YAML `true` is not the count 1.
Small = Annotated[int, Field(gt=0, le=64, strict=True)]
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS, strict=True)]
Seconds = Annotated[int, Field(gt=0, le=MAX_TIMEOUT_S, strict=True)]
# The concurrency gate caps its stream counts here too (gates/concurrency.py).
Streams = Annotated[int, Field(gt=0, le=1024, strict=True)]
AbsPath = Annotated[NonEmpty, AfterValidator(checks.absolute_path)]
MountPath = Annotated[NonEmpty, AfterValidator(checks.mount_path)]
Word = Annotated[NonEmpty, AfterValidator(checks.argv_word)]
# Strings a profile may hold a tab in (free text and log markers, never a unit key or an argv word).
TAB_OK: frozenset[tuple[str, ...]] = frozenset(
    {("description",), ("boot", "expect"), ("boot", "forbid"), ("boot", "sanity_prompt")}
)


class _Strict(BaseModel):
    # allow_inf_nan=False: an `.inf` band can never fail and a NaN is invalid JSON in argv.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)


class Box(_Strict):
    """The machine: which accelerators, where models and caches live."""

    name: NonEmpty
    accelerator: Literal["rocm", "cuda", "cpu"]
    gpus: tuple[Annotated[int, Field(ge=0, le=255, strict=True)], ...] = Field((), max_length=64)
    models_dir: MountPath
    cache_root: MountPath
    etc_dir: AbsPath = "/etc/paroctl"


class Runtime(_Strict):
    """Where the serve lives: a systemd unit running a container engine, or a local process."""

    kind: Literal["systemd", "local"]
    engine: Literal["podman", "docker", "none"] = "podman"
    engine_path: AbsPath | None = None
    scope: Literal["system", "user"] = "system"


class Image(_Strict):
    """The container image the serve runs in."""

    ref: Annotated[NonEmpty, AfterValidator(checks.image_ref)]
    kind: Literal["rocm", "cuda", "cpu"]


# The capabilities a serve may ask back after --cap-drop ALL (debugging, pinned memory, priority).
Capability = Literal["SYS_PTRACE", "IPC_LOCK", "SYS_NICE", "SYS_RESOURCE"]


class Container(_Strict):
    """Container flags; least privilege unless the profile asks otherwise."""

    devices: tuple[Annotated[NonEmpty, AfterValidator(checks.device)], ...] = Field(
        (), max_length=64
    )
    group_add: tuple[Word, ...] = Field((), max_length=32)
    ipc: Literal["host", "private", "shareable"] = "private"
    shm_size: Annotated[str, Field(pattern=r"^[0-9]{1,6}[kmg]?$")] = "8g"
    privileged: bool = False
    secrets_env_file: AbsPath | None = None
    secret_names: tuple[Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")], ...] = Field(
        (), max_length=64
    )
    stop_grace_s: Seconds = 30
    # Least privilege (paroctl/privilege.py): every capability dropped unless listed here; a
    # numeric UID[:GID] runs the serve as that user (the GPU nodes then need the host's render and
    # video GIDs in group_add, as numbers: names resolve against the image's /etc/group).
    cap_add: tuple[Capability, ...] = Field((), max_length=8)
    user: Annotated[str, Field(pattern=r"^[0-9]{1,10}(:[0-9]{1,10})?$")] | None = None

    @model_validator(mode="after")
    def _secrets_need_file(self) -> Container:
        if self.secret_names and not self.secrets_env_file:
            raise ValueError("secret_names needs secrets_env_file (a 0600 EnvironmentFile)")
        return self


ModelPath = Annotated[NonEmpty, AfterValidator(checks.relative_model_path)]


class Model(_Strict):
    """What is served and under which names."""

    path: ModelPath
    served_names: tuple[Word, ...] = Field(min_length=1, max_length=16)
    quantization: Word | None = None

    @field_validator("served_names")
    @classmethod
    def _unique(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(names)) != len(names):
            raise ValueError("served names repeat")
        return names


class Speculative(_Strict):
    """Speculative decoding: the drafter and its draft length."""

    method: Word
    model: ModelPath
    num_speculative_tokens: Small


class Serve(_Strict):
    """vLLM serve settings."""

    entrypoint: tuple[NonEmpty, ...] = Field(
        ("python3", "-m", "vllm.entrypoints.openai.api_server"), min_length=1, max_length=32
    )
    # Loopback unless the profile opts into a LAN address (which then needs an API key).
    host: Word = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535, strict=True)] = 8080
    mode: Literal["prod", "eval"]
    tensor_parallel_size: Small = 1
    max_model_len: Tokens
    gpu_memory_utilization: Fraction | None = None
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"] = "auto"
    kv_cache_memory: Annotated[str, Field(pattern=r"^[0-9]{1,6}(\.[0-9]{1,3})?[KMG]$")] | None = (
        None
    )
    max_num_batched_tokens: Tokens | None = None
    max_num_seqs: Annotated[int, Field(gt=0, le=65536, strict=True)] | None = None
    enable_prefix_caching: bool = True
    max_logprobs: Tokens | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    speculative: Speculative | None = None
    generation_override: dict[Word, float | int] | None = Field(None, max_length=32)
    extra_args: tuple[NonEmpty, ...] = Field((), max_length=128)
    boot_timeout_s: Seconds = 1800

    @field_validator("entrypoint")
    @classmethod
    def _plain_program(cls, entry: tuple[str, ...]) -> tuple[str, ...]:
        try:
            checks.executable(entry[0])
        except ValueError as exc:
            raise ValueError(f"[0]: {exc}") from exc
        return entry

    @field_validator("generation_override", mode="before")
    @classmethod
    def _known_in_range(cls, values: Any) -> Any:
        # Before the type check: the float | int union would report inf once per member, under
        # keys like `temperature.int` that name nothing in the file.
        for key, value in values.items() if isinstance(values, dict) else ():
            if key not in GENERATION_RANGES:
                known = ", ".join(GENERATION_RANGES)
                raise ValueError(f"{checks.short(key)}: not a generation key vLLM reads ({known})")
            low, high, integer = GENERATION_RANGES[key]
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or not low <= value <= high:
                kind = "an integer" if integer else "a number"
                raise ValueError(f"{key}: expected {kind} in [{low:g}, {high:g}], got {value!r}")
            if integer and not isinstance(value, int):
                raise ValueError(f"{key}: expected an integer, got {value!r}")
            if key in ("top_p", "repetition_penalty") and value <= 0:
                raise ValueError(f"{key}: expected a number above 0, got {value!r}")
        return values


# The keys vLLM takes from --override-generation-config (ModelConfig.get_diff_sampling_param, vllm
# 0.32) and the ranges SamplingParams._verify_args accepts: (low, high, integer). A value outside
# them fails every request of the serve, not the boot.
GENERATION_RANGES: dict[str, tuple[float, float, bool]] = {
    "temperature": (0.0, 2.0, False),
    "top_p": (0.0, 1.0, False),  # (0, 1]
    "top_k": (-1, 2**31 - 1, True),  # 0 or -1 disable
    "min_p": (0.0, 1.0, False),
    "repetition_penalty": (0.0, 1e9, False),  # above 0
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
    "max_new_tokens": (1, MAX_TOKENS, True),
}


class Boot(_Strict):
    """Boot-log markers: every `expect` must appear, no `forbid` may (substrings; `re:` = regex)."""

    expect: tuple[NonEmpty, ...] = ()
    forbid: tuple[NonEmpty, ...] = ()
    # The one greedy completion a switch sends before it calls a boot good; sanity_expect is a
    # case-insensitive substring of the answer, or a regex after `re:`.
    sanity_prompt: NonEmpty = "The capital of France is"
    sanity_expect: NonEmpty = "Paris"
    # Tokens the sanity completion may use: 1 where the expected answer is the first token (the
    # check then costs one forward pass; a switch pays it on every boot).
    sanity_max_tokens: Small = 8

    @field_validator("expect", "forbid")
    @classmethod
    def _regexes_compile(cls, lines: tuple[str, ...]) -> tuple[str, ...]:
        for index, line in enumerate(lines):
            try:
                _check_regex(line)
            except ValueError as exc:
                raise ValueError(f"[{index}]: {exc}") from exc
        return lines

    @field_validator("sanity_expect")
    @classmethod
    def _sanity_regex_compiles(cls, line: str) -> str:
        return _check_regex(line)


def _check_regex(line: str) -> str:
    """A `re:` marker must compile, match in bounded time and not match everything; else it is a
    plain substring, which must not be blank."""
    checks.blank(line.removeprefix("re:"))
    if line.startswith("re:"):
        try:
            pattern = re.compile(line[3:])
        except re.error as exc:
            raise ValueError(f"bad regex {checks.short(line[3:])}: {exc}") from exc
        # A pattern that matches the empty string is found in every text: an expect or
        # sanity_expect that always passes, a forbid that always fails.
        if pattern.search("") is not None:
            raise ValueError(f"regex {checks.short(line[3:])} matches any text (even an empty one)")
        slow = checks.backtracking(line[3:])
        if slow:
            raise ValueError(
                f"regex {checks.short(line[3:])} has {slow}: it can backtrack for minutes on one "
                "line; write the repeated part without its own quantifier or alternatives"
            )
    return line


class Gsm8kBand(_Strict):
    """GSM8K: pass when the Wilson 95% lower bound of the chosen metric clears min_lower_bound."""

    min_lower_bound: Fraction | None = None  # None: run and record, do not judge
    metric: Literal["strict-match", "flexible-extract"] = "flexible-extract"
    limit: Annotated[int, Field(gt=0, le=100_000, strict=True)] = 500
    concurrency: Streams = 8


class DecodeBand(_Strict):
    """Decode: the largest acceptable ms per step at each context length (tokens)."""

    max_ms_per_step: dict[Tokens, PosFloat] = Field(min_length=1, max_length=64)


class PrefillBand(_Strict):
    """Prefill: the smallest acceptable prompt tokens/s at each prompt length."""

    min_tok_s: dict[Tokens, PosFloat] = Field(min_length=1, max_length=64)


class ConcurrencyBand(_Strict):
    """Concurrency: the smallest acceptable aggregate decode tokens/s at each stream count."""

    min_aggregate_tok_s: dict[Streams, PosFloat] = Field(min_length=1, max_length=64)


class KvBand(_Strict):
    """KV cache: the smallest acceptable token count (never judged on a first boot)."""

    min_tokens: Annotated[int, Field(gt=0, le=2**40, strict=True)]


class KldBand(_Strict):
    """KL divergence against a same-stack reference profile."""

    reference: NonEmpty
    top_k: Tokens = 256
    max_mean_kl: PosFloat
    min_top1: Fraction


class LmEvalTask(_Strict):
    """One lm-eval task's band: the 95% lower bound of `metric` (lm-eval's name) under `filter`
    must reach min_lower_bound (Wilson for 0/1 samples, else a seeded bootstrap)."""

    metric: Word = "acc"
    filter: Word = "none"
    min_lower_bound: Fraction | None = None  # None: run and record, do not judge


class LmEvalBand(_Strict):
    """`paroctl gate lm-eval`: lm-eval tasks, run by lm-eval itself against the serve."""

    tasks: dict[Word, LmEvalTask] = Field(min_length=1, max_length=64)
    limit: Annotated[int, Field(gt=0, le=100_000, strict=True)] | None = None  # None: all
    concurrency: Streams = 8
    num_fewshot: Annotated[int, Field(ge=0, le=64, strict=True)] | None = None  # None: the task's
    # The accuracy a task may give up against the run named by --against (paired, per sample).
    margin: Fraction = 0.02


# The sanity gate's required checks (paroctl/gates/sanity.py CHECKS; a test holds the two lists
# equal: the profile layer does not import the gates).
SanityCheck = Literal[
    "capital-completion", "opposite-completion", "count-completion", "capital-chat", "long-recall"
]


class SanityBand(_Strict):
    """Sanity: the required checks that judge this serve (default: every one). A check left out
    still runs and is recorded, like the arithmetic probes; the profile says why (measured)."""

    judge: tuple[SanityCheck, ...] = Field(min_length=1, max_length=16)


GateName = Literal["sanity", "greedy", "gsm8k", "decode", "prefill", "concurrency", "kld"]


class Gates(_Strict):
    """Gate bands; a missing band means the gate runs and reports but does not judge."""

    # `paroctl gate suite` runs these in order: cheap mechanical gates first, so a broken serve
    # fails in seconds rather than after GSM8K.
    suite: tuple[GateName, ...] = Field(
        ("sanity", "greedy", "gsm8k", "decode", "prefill", "concurrency"), min_length=1
    )

    # `paroctl switch NAME --gate`: what an inconclusive gate means (default: keep the previous
    # serve), and the GSM8K accuracy a build may give up against the one it replaces (paired).
    inconclusive: Literal["keep-previous", "promote"] = "keep-previous"
    gsm8k_margin: Fraction = 0.02
    sanity: SanityBand | None = None
    gsm8k: Gsm8kBand | None = None
    decode: DecodeBand | None = None
    prefill: PrefillBand | None = None
    concurrency: ConcurrencyBand | None = None
    kv: KvBand | None = None
    kld: KldBand | None = None
    lm_eval: LmEvalBand | None = None


class ProfileBody(_Strict):
    """The validated content of a profile file after `extends:` is resolved."""

    description: Annotated[
        str, Field(min_length=1, max_length=1000), AfterValidator(checks.no_trailing_backslash)
    ]
    box: Box
    runtime: Runtime
    image: Image | None = None
    container: Container = Container()
    model: Model
    serve: Serve
    env: dict[str, Any] = {}
    knobs: dict[str, Any] = {}
    boot: Boot = Boot()
    gates: Gates = Gates()
    cluster: Cluster | None = None  # Kubernetes only (paroctl/cluster.py); not in the hash


class Profile(BaseModel):
    """A validated profile: body plus name, source file, hash and every knob resolved."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    path: Path
    body: ProfileBody
    knobs: dict[str, str]
    env: dict[str, str]
    hash: str
    registry_digest: str

    @property
    def unit_name(self) -> str:
        """The systemd unit (and container) name."""
        return f"paroctl-{self.name}"

    @property
    def uses_engine(self) -> bool:
        """True when the serve runs inside a container engine."""
        return self.body.runtime.engine != "none"
