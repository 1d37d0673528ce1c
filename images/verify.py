"""Run inside a paroctl image at build time: the image holds exactly what its labels will claim.

Standard library only (it runs before anything else is known to work). Exit 1 names every problem.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import sys
from pathlib import Path


def problems(args: argparse.Namespace) -> list[str]:
    """Every way the installed stack differs from the expected one."""
    out = []
    expected = {args.vllm_dist: args.vllm, "paro-kernels": args.kernels, "paro-vllm": args.plugin}
    for dist, version in expected.items():
        try:
            have = md.version(dist)
        except md.PackageNotFoundError:
            out.append(f"{dist} is not installed")
            continue
        # A local tag (+cpu, +rocm...) belongs to the same release.
        if have.split("+")[0] != version:
            out.append(f"{dist} {have} installed, expected {version}")
    plugins = {ep.name: ep.value for ep in md.entry_points(group="vllm.general_plugins")}
    if plugins.get("paro") != "paro_vllm:register":
        out.append(f"vllm.general_plugins has no paro = paro_vllm:register ({plugins})")
    spec = importlib.util.find_spec("paro_vllm")
    if spec is None or spec.origin is None or "-packages" not in spec.origin:
        out.append(f"paro_vllm resolves outside site-packages: {spec and spec.origin}")
    # The seed registered its method from a sitecustomize; a leftover one in the base would run
    # before the plugin and could shadow it.
    for entry in sys.path:
        found = Path(entry or ".") / "sitecustomize.py"
        if found.is_file() and "paro" in found.read_text(errors="replace").lower():
            out.append(f"{found} mentions paro: registration must go through the entry point")
    # Knobs belong to the profile, forwarded at run time; one baked in here would be an
    # unregistered name (the plugin refuses to boot) or a default nobody sees.
    baked = sorted(name for name in os.environ if name.startswith("PARO_"))
    if baked:
        out.append(f"PARO_* variables set in the image: {baked}")
    return out


def main() -> int:
    """Check and report; 0 when the image is what it claims."""
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--vllm-dist", "--vllm", "--kernels", "--plugin"):
        parser.add_argument(flag, required=True)
    found = problems(parser.parse_args())
    for line in found:
        print(f"paroctl verify: {line}", file=sys.stderr)
    if not found:
        print("paroctl verify: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
