"""jinja2 (StrictUndefined) over typed contexts -> systemd unit, Quadlet file, env list."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from paroctl import state
from paroctl.errors import RenderError, StateError
from paroctl.profile import checks, knobs
from paroctl.profile.profiles import Profile, expand, list_names
from paroctl.serve import engine
from paroctl.serve.plan import ServePlan

Format = Literal["service", "quadlet", "env"]
# Who parses a rendered env file: systemd's EnvironmentFile= (engine none) or the engine's
# --env-file (podman and docker, Quadlet's EnvironmentFile= included).
EnvReader = Literal["systemd", "engine"]
FORMATS: tuple[Format, ...] = ("service", "quadlet", "env")

# Characters systemd passes through an ExecStart word unquoted.
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclass(frozen=True)
class Artefact:
    """One rendered file: its name and content."""

    filename: str
    content: str


@dataclass(frozen=True)
class UnitContext:
    """Everything the .service and .container templates may use."""

    name: str
    hash: str
    description: str
    source: str
    unit: str
    conflicts: tuple[str, ...]
    engine: bool
    image: str
    env_file: str
    secrets_file: str
    cache_dir: str
    exec_start: str
    exec_stop: str
    exec_cleanup: str
    exec_args: str
    mkdir: str
    chown: str
    timeout_start_s: int
    stop_grace_s: int
    timeout_stop_s: int
    wanted_by: str
    labels: tuple[str, ...]
    devices: tuple[str, ...]
    publish: str
    volumes: tuple[str, ...]
    podman_args: str
    no_new_privileges: bool


@dataclass(frozen=True)
class EnvContext:
    """Everything the env-forwarding template may use."""

    name: str
    hash: str
    registry: str
    reader: EnvReader
    derived: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    knobs_set: tuple[tuple[str, str], ...]
    knobs_default: tuple[tuple[str, str], ...]


def systemd_join(argv: list[str]) -> str:
    """Join argv for an Exec line: systemd quoting, with % and $ escaped so nothing expands."""
    words = []
    for word in argv:
        if not _SAFE_WORD.match(word):
            word = '"' + _C_ESCAPE.sub(_c_escape, word) + '"'
        words.append(word.replace("%", "%%").replace("$", "$$"))
    return " ".join(words)


def exec_line(argv: list[str]) -> str:
    """An ExecStart= value: systemd_join, with a program that systemd would read as a prefix
    refused (@-:+!| before the program; '+' runs it with full privileges)."""
    # Belt and braces: profiles.load refuses such a serve.entrypoint[0] first. A quoted program
    # word cannot hide a prefix: systemd reads prefixes before it unquotes.
    if not argv or not argv[0] or argv[0][0] in "@-:+!|":
        program = checks.short(argv[0] if argv else "")
        raise RenderError(f"refusing to render {program} as the program of an ExecStart= line")
    return systemd_join(argv)


# Inside a quoted Exec word systemd undoes C escapes: a control character written as \xNN stays
# one argv character instead of ending the line (the profile boundary refuses them anyway).
_C_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f]')


def _c_escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\" + char if char in '\\"' else f"\\x{ord(char):02x}"


def unit_value(value: object) -> str:
    """A unit-file value: % escaped (no specifier expands); a control character is refused."""
    text = str(value)
    _refuse_line_breaks(text, "unit file")
    return text.replace("%", "%%")


def env_value(value: object, reader: EnvReader = "engine") -> str:
    """An env-file value written so that its reader reads back exactly `value`; a control
    character is refused (it would split the line, and systemd drops such a value)."""
    text = str(value)
    found = checks.control_char(text)
    if found:
        raise RenderError(f"refusing to render {checks.short(text)} into an env file: {found}")
    # podman's and docker's --env-file take everything after the first '=' literally (podman
    # 4.3-5.x, pkg/env; 4.7.x alone parsed dotenv quoting and was reverted in 4.8).
    return systemd_env_value(text) if reader == "systemd" else text


def systemd_env_value(text: str) -> str:
    """A value as systemd's env-file parser (load_env_file) reads it back unchanged: as is where
    that is already so, else double-quoted with backslash and quote escaped."""
    # Unquoted, systemd strips blanks around the value and reads a backslash as an escape; a
    # leading quote opens a quoted value that runs over the following lines until it closes
    # (`"ab` swallowed every knob after it).
    if not text or (text[0] not in "\"'" and "\\" not in text and text == text.strip(" \t\n\r")):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_key(value: object) -> str:
    """An env-file key: a variable name (profiles.load and the knob registry check it first)."""
    text = str(value)
    if not _ENV_KEY.fullmatch(text):
        raise RenderError(f"refusing to render {checks.short(text)} as an env-file variable name")
    return text


_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _refuse_line_breaks(text: str, where: str) -> None:
    # Belt and braces: profiles.load refuses these first; a Profile built another way stops here.
    found = checks.control_char(text, allow_tab=True)
    if found or text.endswith("\\"):
        what = found or "a trailing backslash"
        raise RenderError(f"refusing to render {checks.short(text)} into a {where}: {what}")


def unit_filename(profile: Profile, fmt: Format) -> str:
    """The file a format renders to."""
    suffix = {"service": ".service", "quadlet": ".container", "env": ".env"}[fmt]
    return (profile.name if fmt == "env" else profile.unit_name) + suffix


def formats_for(profile: Profile) -> tuple[Format, ...]:
    """The artefacts a profile has: no Quadlet file without a container engine."""
    return FORMATS if profile.uses_engine else ("service", "env")


def artefact(plan: ServePlan, fmt: Format) -> Artefact:
    """Render one artefact of a serve plan."""
    profile = plan.profile
    if fmt == "quadlet" and not profile.uses_engine:
        raise RenderError(
            f"{profile.path}: runtime.engine: none; a Quadlet file needs podman "
            f"(render --format service or env instead)"
        )
    if fmt == "env":
        content = _template("env.j2", asdict(env_context(plan)))
    else:
        template = "service.j2" if fmt == "service" else "container.j2"
        content = _template(template, asdict(unit_context(plan)))
    return Artefact(unit_filename(profile, fmt), content)


def artefacts(plan: ServePlan) -> list[Artefact]:
    """Every artefact of a serve plan."""
    return [artefact(plan, fmt) for fmt in formats_for(plan.profile)]


def render(profile: Profile, fmt: Format) -> Artefact:
    """Render one artefact of a profile (derives its plan: for one artefact alone)."""
    return artefact(ServePlan.of(profile), fmt)


def render_all(profile: Profile) -> list[Artefact]:
    """Every artefact of a profile, from one plan."""
    return artefacts(ServePlan.of(profile))


def unit_context(plan: ServePlan) -> UnitContext:
    """Build the typed context of the unit templates."""
    profile, where = plan.profile, plan.layout
    body, container = profile.body, profile.body.container
    others = tuple(
        f"paroctl-{n}.service" for n in list_names(profile.path.parent) if n != profile.name
    )
    uses_engine = profile.uses_engine
    return UnitContext(
        name=profile.name,
        hash=profile.hash,
        description=body.description,
        source=profile.path.name,
        unit=profile.unit_name,
        conflicts=others,
        engine=uses_engine,
        image=body.image.ref if body.image else "",
        env_file=where.env_file,
        secrets_file=expand(container.secrets_env_file) if container.secrets_env_file else "",
        cache_dir=where.cache_dir,
        exec_start=exec_line(engine.exec_argv(plan)),
        exec_stop=systemd_join(engine.stop_command(plan)) if uses_engine else "",
        exec_cleanup=systemd_join(engine.rm_command(plan)) if uses_engine else "",
        exec_args=systemd_join(list(plan.argv)),
        mkdir=systemd_join(["/usr/bin/mkdir", "-p", where.cache_dir]),
        # A serve run as container.user writes its compile caches there; the mkdir above is root's.
        chown=(
            systemd_join(["/usr/bin/chown", container.user, where.cache_dir])
            if container.user
            else ""
        ),
        timeout_start_s=body.serve.boot_timeout_s,
        stop_grace_s=container.stop_grace_s,
        timeout_stop_s=container.stop_grace_s + 15,
        wanted_by="multi-user.target" if body.runtime.scope == "system" else "default.target",
        labels=(f"paroctl.profile={profile.name}", f"paroctl.profile-hash={profile.hash}"),
        devices=() if container.privileged else container.devices,
        publish=engine.publish_spec(profile),
        volumes=(
            f"{where.models_dir}:{engine.MODELS_MOUNT}:ro",
            f"{where.cache_dir}:{engine.CACHE_MOUNT}",
        ),
        # Through PodmanArgs, not DropCapability=/User=: the same flags as the .service's argv,
        # and Quadlet's defaults for those keys changed between podman releases.
        podman_args=systemd_join(plan.container.podman_args()),
        no_new_privileges=not container.privileged,
    )


def env_context(plan: ServePlan) -> EnvContext:
    """Build the typed context of the env-forwarding template."""
    profile = plan.profile
    registry = knobs.load_registry()
    raw_knobs = profile.body.knobs
    knob_names = set(registry.knobs)
    derived = tuple((k, v) for k, v in plan.env.items() if k in knobs.DERIVED_ENV)
    return EnvContext(
        name=profile.name,
        hash=profile.hash,
        registry=registry.digest[:12],
        reader="engine" if profile.uses_engine else "systemd",
        derived=derived,
        env=tuple(profile.env.items()),
        knobs_set=tuple((k, v) for k, v in profile.knobs.items() if k in raw_knobs),
        knobs_default=tuple(
            (k, v) for k, v in profile.knobs.items() if k in knob_names and k not in raw_knobs
        ),
    )


def installed_diff(files: Iterable[tuple[Path, str]]) -> str:
    """How installed files differ from their renders, as a unified diff ('' when all match):
    a missing file, or one that is not UTF-8 text, is one line saying so."""
    import difflib

    chunks: list[str] = []
    for path, rendered in files:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            chunks.append(f"{path}: not installed\n")
            continue
        except OSError as exc:
            raise StateError(f"cannot read the installed {path}: {exc.strerror}") from exc
        try:
            installed = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            chunks.append(f"{path}: installed file is not UTF-8 text (byte {exc.start}); differs\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                installed.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                fromfile=f"{path} (installed)",
                tofile=f"{path} (rendered)",
            )
        )
    return "".join(chunks)


@functools.cache
def _environment(directory: str) -> Any:
    """One Jinja environment per template directory: it compiles each template once per process
    (and checks the file's mtime on every use, so an edited template is picked up)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["unit_value"] = unit_value
    env.filters["env_value"] = env_value
    env.filters["env_key"] = env_key
    return env


def _template(name: str, context: dict[str, object]) -> str:
    import jinja2

    env = _environment(str(state.resource_path("units")))
    try:
        return str(env.get_template(name).render(**context))
    except jinja2.TemplateError as exc:
        raise RenderError(f"{Path('units') / name}: {exc}") from exc
