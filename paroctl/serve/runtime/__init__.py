"""Where a serve lives: the Runtime interface and its implementations (local process, systemd)."""

from paroctl.serve.runtime.base import Runtime, ServeSpec

__all__ = ["Runtime", "ServeSpec"]
