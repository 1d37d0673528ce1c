"""`paro-quant`: make (rtn, mxfp4, nvfp4) and validate (inspect) quantized checkpoints.

`rtn --bits 4|5` writes ParoQuant int4 / int5-bitplane, `mxfp4` MXFP4-PARO (`paroquant_mxfp4`),
`nvfp4` a compressed-tensors NVFP4 checkpoint that may mix in FP8 per-channel and bf16 (ignored)
linears, the shape of the seed's unsloth checkpoint that `nvfp4_mxfp4` requantizes at load.
"""

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
    mx = sub.add_parser("mxfp4", help="MXFP4-PARO (e2m1 + e8m0/32 of rotated W) of a bf16 model")
    _src_dst(mx)
    mx.add_argument("--group-size", type=int, choices=(32, 64, 128), default=None)
    mx.add_argument("--krot", type=int, default=8, help="Givens layers per linear")
    mx.add_argument("--exp", choices=("mse", "ocp"), default="mse", help="block exponent rule")
    mx.add_argument("--seed", type=int, default=0)
    nv = sub.add_parser("nvfp4", help="compressed-tensors NVFP4 (+ FP8 / bf16 linears) of a model")
    _src_dst(nv)
    nv.add_argument(
        "--fp8",
        metavar="REGEX",
        default=None,
        help="linears whose prefix matches are written FP8 per-channel instead of NVFP4",
    )
    nv.add_argument(
        "--bf16",
        metavar="REGEX",
        default=None,
        help="linears whose prefix matches stay bf16 and are listed in the config's ignore",
    )
    ins = sub.add_parser("inspect", help="validate a ParoQuant checkpoint dir")
    ins.add_argument("path", type=Path)
    ins.add_argument("-v", "--verbose", action="store_true", help="per-layer details")
    return p


def _src_dst(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", type=Path, help="bf16 model dir (config.json + *.safetensors)")
    p.add_argument("dst", type=Path, help="output dir (must be empty or absent)")


def _dst_taken(dst: Path) -> bool:
    if dst.exists() and any(dst.iterdir()):
        print(f"error: {dst}: exists and is not empty", file=sys.stderr)
        return True
    return False


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()) if v)


def _cmd_mxfp4(args: argparse.Namespace) -> int:
    from .builders import paro_mxfp4_checkpoint

    if _dst_taken(args.dst):
        return EXIT_CANNOT_RUN
    s = paro_mxfp4_checkpoint(
        args.src,
        args.dst,
        group_size=args.group_size,
        krot=args.krot,
        rule=args.exp,
        seed=args.seed,
    )
    print(
        f"wrote {args.dst}: {s.layers} linears MXFP4-PARO g{s.group_size} krot {args.krot}, "
        f"exp {args.exp}"
    )
    return EXIT_OK


def _cmd_nvfp4(args: argparse.Namespace) -> int:
    from .builders import nvfp4_checkpoint

    if _dst_taken(args.dst):
        return EXIT_CANNOT_RUN
    s = nvfp4_checkpoint(args.src, args.dst, fp8_pattern=args.fp8, bf16_pattern=args.bf16)
    print(f"wrote {args.dst}: {s.layers} linears compressed-tensors ({_kinds(s.kinds)})")
    return EXIT_OK


def _cmd_rtn(args: argparse.Namespace) -> int:
    from .checkpoint import RtnOptions, rtn_checkpoint

    if _dst_taken(args.dst):
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
    commands = {"rtn": _cmd_rtn, "mxfp4": _cmd_mxfp4, "nvfp4": _cmd_nvfp4, "inspect": _cmd_inspect}
    try:
        return commands[args.command](args)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
