"""The one exception tree. Exit codes: 0 ok, 1 a gate failed (bad model), 2 cannot run, 130 ^C."""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130  # Ctrl-C (and SIGTERM/SIGHUP during a switch), as a shell reports it


class ParoctlError(Exception):
    """Anything paroctl refuses or cannot do; the CLI prints it and exits with exit_code."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProfileError(ParoctlError):
    """Problems in profile files; `problems` holds every one, each naming its file and key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class RegistryError(ParoctlError):
    """The plugin's knob registry is unreadable or malformed."""


class RenderError(ParoctlError):
    """A template could not be rendered (a missing variable or a template syntax error)."""


class StateError(ParoctlError):
    """PAROCTL_HOME, the lock, the live pointer, the journal, the results store or an installed
    file is not usable."""


class UsageError(ParoctlError):
    """The command asks for something that does not exist or cannot apply here (an unknown gate,
    run or profile name; no live serve to act on; options that contradict each other)."""


class DataError(ParoctlError):
    """Input data (a gate's dataset, a corpus, a tokenizer's answer, a stored run) is missing or
    malformed."""


class RuntimeFailure(ParoctlError):
    """A serve could not be started, stopped or inspected."""


class GateFailed(ParoctlError):
    """A gate ran and the model is outside its band."""

    exit_code = EXIT_GATE_FAILED
