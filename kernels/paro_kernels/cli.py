"""`paro-quant`: make (rtn) and validate (inspect) ParoQuant checkpoints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_INVALID, EXIT_CANNOT_RUN = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paro-quant", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    rtn = sub.add_parser("rtn", help="RTN-quantize a bf16 HF safetensors model to ParoQuant")
    rtn.add_argument("src", type=Path, help="model dir (config.json + *.safetensors)")
    rtn.add_argument("dst", type=Path, help="output dir (must be empty or absent)")
    rtn.add_argument("--bits", type=int, choices=(4, 5), default=4)
    rtn.add_argument(
        "--group-size",
        type=int,
        choices=(64, 128),
        default=None,
        help="default: 128, or 64 when 128 does not divide every in_features",
    )
    rtn.add_argument("--krot", type=int, default=8, help="Givens layers per linear")
    rtn.add_argument("--rotation", choices=("random", "identity"), default="random")
    rtn.add_argument("--channel-scales", choices=("ones", "random"), default="ones")
    rtn.add_argument("--seed", type=int, default=0)
    ins = sub.add_parser("inspect", help="validate a ParoQuant checkpoint dir")
    ins.add_argument("path", type=Path)
    ins.add_argument("-v", "--verbose", action="store_true", help="per-layer details")
    return p


def _cmd_rtn(args: argparse.Namespace) -> int:
    from .checkpoint import RtnOptions, rtn_checkpoint

    if args.dst.exists() and any(args.dst.iterdir()):
        print(f"error: {args.dst}: exists and is not empty", file=sys.stderr)
        return EXIT_CANNOT_RUN
    opts = RtnOptions(
        bits=args.bits,
        group_size=args.group_size,
        krot=args.krot,
        rotation=args.rotation,
        channel_scales=args.channel_scales,
        seed=args.seed,
    )
    s = rtn_checkpoint(args.src, args.dst, opts)
    print(
        f"wrote {args.dst}: {s.layers} linears, int{opts.bits} g{s.group_size} "
        f"krot {opts.krot}, rotation {opts.rotation}, {len(s.files)} file(s)"
    )
    return EXIT_OK


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .checkpoint import inspect_checkpoint

    rep = inspect_checkpoint(args.path)
    for line in rep.info if args.verbose else []:
        print(f"  {line}")
    for line in rep.warnings:
        print(f"WARNING {line}")
    for line in rep.errors:
        print(f"ERROR {line}")
    verdict = "OK" if rep.ok else f"INVALID ({len(rep.errors)} error(s))"
    print(f"{args.path}: {rep.layers} quantized linears, {len(rep.warnings)} warning(s): {verdict}")
    return EXIT_OK if rep.ok else EXIT_INVALID


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, run, map CheckpointError to a one-line message and exit code 2."""
    from .checkpoint import CheckpointError

    args = _parser().parse_args(argv)
    try:
        return _cmd_rtn(args) if args.command == "rtn" else _cmd_inspect(args)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
