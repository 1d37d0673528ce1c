"""Ahead-of-time builds of the kernels for a named GPU, without that GPU: ISA facts for CI/bench.

`triton.compile` with a `GPUTarget` runs the whole backend on the CPU (ENVIRONMENT.md, last
section): gfx1201 gives amdgcn text with `.vgpr_count` / `.vgpr_spill_count` /
`.private_segment_fixed_size`; sm_90 gives PTX, whose `.local` declarations are the spills.
The W4A8 GEMMs are checked for the 8-bit matrix instruction of their activation format
(`MMA_A8`): `v_wmma_f32_16x16x16_fp8_fp8` and `v_wmma_i32_16x16x16_iu8` on gfx1201.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import triton
from triton.backends.compiler import GPUTarget

from . import kernels
from .host import (
    Config,
    a16,
    e4m3_bits,
    pick_config,
    pick_config_a8,
    prologue_block_m,
    prologue_cols,
    prologue_warps,
)
from .precompile import amdgcn_meta

TARGETS = {
    "gfx1201": (GPUTarget("hip", "gfx1201", 32), 64 * 1024),
    "sm90": (GPUTarget("cuda", 90, 32), 227 * 1024),
}
# A dot must become the target's matrix instruction, not a scalar loop.
MMA_PATTERNS = {"gfx1201": r"v_wmma_f32_16x16x16_(f16|bf16)", "sm90": r"(wgmma|mma\.sync)"}
# The W4A8 GEMM loops must run on the 8-bit matrix instructions of their activation format.
MMA_A8 = {
    ("gfx1201", "fp8"): r"v_wmma_f32_16x16x16_fp8_fp8",
    ("gfx1201", "int8"): r"v_wmma_i32_16x16x16_iu8",
    # sm90 below 64-row tiles: fp16 mma on the upcast codes (kernel doc, A16)
    ("sm90", "fp8"): r"(wgmma\S*e4m3|mma\.sync\S*(e4m3|f16))",
    ("sm90", "int8"): r"(wgmma\S*s8|mma\.sync\S*s8)",
}


@dataclass(frozen=True)
class Report:
    """What the ISA of one compiled kernel says."""

    name: str
    target: str
    config: str
    mma: bool
    vgprs: int
    spills: int
    scratch: int
    lds: int
    lds_limit: int


def _report(
    name: str, target: str, cfg: str, compiled: object, pattern: str | None = None
) -> Report:
    asm_key = "amdgcn" if target == "gfx1201" else "ptx"
    asm = compiled.asm[asm_key]  # type: ignore[attr-defined]
    lds = int(compiled.metadata.shared)  # type: ignore[attr-defined]
    mma = re.search(pattern or MMA_PATTERNS[target], asm) is not None
    if target == "gfx1201":
        vgprs, spills = amdgcn_meta(asm, "vgpr_count"), amdgcn_meta(asm, "vgpr_spill_count")
        scratch = amdgcn_meta(asm, "private_segment_fixed_size")
    else:
        vgprs, spills, scratch = 0, len(re.findall(r"\.local\s", asm)), 0
    return Report(name, target, cfg, mma, vgprs, spills, scratch, lds, TARGETS[target][1])


def _compile(fn: object, signature: dict[str, str], constexprs: Mapping[str, object], target: str,
             num_warps: int, num_stages: int, aligned: tuple[str, ...] = (),
             maxnreg: int = 0) -> object:  # fmt: skip
    """`aligned`: arguments specialized as multiples of 16 (bytes for pointers), as the JIT
    specializes torch's allocations and shapes at run time; `maxnreg`: a register cap."""
    sig = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(sig) if a in aligned}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    opts = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    return triton.compile(src, target=TARGETS[target][0], options=opts)


def compile_gemm(target: str, m: int, n: int, k: int, g: int, zp_rowsum: bool = False) -> Report:
    """Build the W4A16 GEMM at the config the launcher picks for [M, K] x [K, N] on `target`."""
    hip = target == "gfx1201"
    cfg: Config = pick_config(m, n, k, g, (), sms=64 if hip else 132, hip=hip)
    sig = {
        "a_ptr": "*fp16", "rs_ptr": "*fp32", "qw_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "bias_ptr": "*bf16", "out_ptr": "*fp32" if cfg.split_k > 1 else "*bf16",
        "fin_ptr": "*bf16", "cnt_ptr": "*i32",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
        "SPLIT_K": cfg.split_k, "GROUP_M": cfg.group_m, "ZP_ROWSUM": zp_rowsum or cfg.rowsum,
        "PLANES": cfg.planes and g == 128, "TICKET": cfg.split_k > 1,
    }  # fmt: skip
    c = _compile(kernels.w4a16_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    name = "w4a16_gemm_zp_rowsum" if zp_rowsum or cfg.rowsum else "w4a16_gemm"
    return _report(name, target, str(cfg), c)


def compile_prologue(target: str, m: int, g: int) -> Report:
    """Build the rotate + scale prologue at the block the launcher picks for M rows (at the
    GEMV's M, `fast_host.band`, its fp32 nibble-scaled output)."""
    from . import fast_host

    block_m = prologue_block_m(m, hip=target == "gfx1201")
    scaled = fast_host.band(m, g) == "gemv"
    sig = {
        "x_ptr": "*bf16", "rot_hi_ptr": "*bf16", "rot_lo_ptr": "*bf16",
        "xr_ptr": "*fp32" if scaled else "*fp16",
        "rs_ptr": "*fp32", "M": "i32", "K": "i32", "stride_xm": "i32",
    }  # fmt: skip
    const = {"G": g, "BLOCK_M": block_m, "NIBBLE_SCALED": scaled}
    c = _compile(kernels.rotate_scale_kernel, sig, const, target, prologue_warps(block_m), 1)
    return _report("rotate_scale", target, f"BLOCK_M={block_m} NIBBLE_SCALED={scaled}", c)


def compile_givens(target: str, m: int, g: int, krot: int = 8) -> Report:
    """Build the decode Givens prologue (no matrix instruction: `mma` reports False)."""
    block_m = prologue_block_m(m, hip=target == "gfx1201")
    sig = {
        "x_ptr": "*bf16", "gi_ptr": "*i32", "gc_ptr": "*fp32", "xr_ptr": "*fp16",
        "rs_ptr": "*fp32", "ws_ptr": "*fp32", "M": "i32", "K": "i32", "stride_xm": "i32",
        "ws_numel": "i32",
    }  # fmt: skip
    const = {"KROT": krot, "G": g, "BLOCK_M": block_m, "ZERO_BLOCK": 4096}
    c = _compile(kernels.givens_rotate_kernel, sig, const, target, 4, 1)
    return _report("givens_rotate", target, f"BLOCK_M={block_m}", c)


def compile_givens_paired(target: str, m: int, g: int = 128, krot: int = 8,
                          rows: int = -1) -> tuple[Report, object]:  # fmt: skip
    """Build the paired records prologue (`fast_kernels.givens_paired_kernel`, NVIDIA's mma
    and HFMA2 GEMVs' input) at the rows a program `fast_host.givens_block_m` picks for M
    (`rows` as its); no matrix instruction. Also returns the compiled kernel."""
    from . import fast_host, fast_kernels

    block_m = fast_host.givens_block_m(m, rows)
    sig = {
        "x_ptr": "*bf16", "gi_ptr": "*i32", "gc_ptr": "*fp32", "xr_ptr": "*fp16",
        "M": "i32", "K": "i32", "stride_xm": "i32",
    }  # fmt: skip
    const = {"KROT": krot, "G": g, "BLOCK_M": block_m, "PSCALE": 1.0, "PDL": False,
             "PAIRED": True}  # fmt: skip
    aligned = (*(a for a in sig if a.endswith("_ptr")), "K", "stride_xm")
    c = _compile(fast_kernels.givens_paired_kernel, sig, const, target,
                 fast_host.GIVENS_PAIRED_WARPS, 1, aligned)  # fmt: skip
    return _report("givens_paired", target, f"BLOCK_M={block_m}", c, r"$^"), c


def compile_w4a8_gemm(
    target: str, m: int, n: int, k: int, g: int, fmt: str, bits: int = 4,
    token: bool = False, zpe: bool = False, bounds: tuple[int, ...] = (),
) -> Report:  # fmt: skip
    """Build the W4A8 / W5A8 GEMM at the config the launcher picks; `mma` = the 8-bit MMA."""
    return compile_w4a8_gemm_kernel(target, m, n, k, g, fmt, bits, token, zpe, bounds)[0]


def compile_w4a8_gemm_kernel(
    target: str, m: int, n: int, k: int, g: int, fmt: str, bits: int = 4,
    token: bool = False, zpe: bool = False, bounds: tuple[int, ...] = (),
) -> tuple[Report, object]:  # fmt: skip
    """`compile_w4a8_gemm`, and the compiled kernel (its AMDGCN / PTX)."""
    hip = target == "gfx1201"
    cfg: Config = pick_config_a8(m, n, k, g, bounds, sms=64 if hip else 132, hip=hip, bits=bits)
    sig = {
        "a_ptr": "*fp8e4nv" if fmt == "fp8" else "*i8", "as_ptr": "*fp32", "rs_ptr": "*fp32",
        "qw_ptr": "*i32", "qh_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "bias_ptr": "*bf16", "out_ptr": "*fp32" if cfg.split_k > 1 else "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
        "SPLIT_K": cfg.split_k, "GROUP_M": cfg.group_m, "INT8": fmt == "int8", "BITS": bits,
        "TOKEN": token, "ZPE": zpe, "BLOCK_G": 16,
        "A16": a16(torch.float8_e4m3fn if fmt == "fp8" else torch.int8, cfg, hip),
        "E4M3_BITS": e4m3_bits(hip),
    }  # fmt: skip
    c = _compile(kernels.w4a8_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    name = f"w{bits}a8_gemm_{fmt}_{'token' if token else 'group'}{'_zpe' if zpe else ''}"
    return _report(name, target, str(cfg), c, MMA_A8[(target, fmt)]), c


def compile_rotate_quant(target: str, m: int, g: int, fmt: str, token: bool) -> Report:
    """Build the fused rotate + scale + quantize prologue at the block the launcher picks."""
    hip = target == "gfx1201"
    block_m = prologue_block_m(m, token, hip=hip)
    cols = prologue_cols(token, g, hip=hip)
    sig = {
        "x_ptr": "*bf16", "rot_hi_ptr": "*bf16", "rot_lo_ptr": "*bf16",
        "q_ptr": "*fp8e4nv" if fmt == "fp8" else "*i8", "as_ptr": "*fp32", "rs_ptr": "*fp32",
        "M": "i32", "K": "i32", "stride_xm": "i32",
    }  # fmt: skip
    const = {"G": g, "BLOCK_M": block_m, "INT8": fmt == "int8", "TOKEN": token, "COLS": cols,
             "E4M3_BITS": fmt == "fp8" and e4m3_bits(hip)}  # fmt: skip
    warps = prologue_warps(block_m, cols)
    c = _compile(kernels.rotate_quant_kernel, sig, const, target, warps, 1)
    name = f"rotate_quant_{fmt}_{'token' if token else 'group'}"
    return _report(name, target, f"BLOCK_M={block_m} COLS={cols} warps={warps}", c)


def compile_dequant(target: str, n: int, k: int, g: int, bits: int = 4,
                    bounds: tuple[int, ...] = ()) -> Report:  # fmt: skip
    """Build the prefill dequantize + rotate kernel; `mma` = the rotation dot on the matrix unit."""
    from . import fast_host, fast_kernels

    bn = fast_host.dequant_block_n(target == "gfx1201")
    sig = {
        "qw_ptr": "*i32", "qh_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "rot_hi_ptr": "*bf16", "rot_lo_ptr": "*bf16", "w_ptr": "*fp16",
        "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"G": g, "BLOCK_N": bn, "BITS": bits, "NSPLIT": 4}
    c = _compile(fast_kernels.dequant_rotate_kernel, sig, const, target,
                 fast_host.dequant_warps(target == "gfx1201"),
                 fast_host.dequant_stages(target == "gfx1201"))  # fmt: skip
    return _report(f"dequant_rotate_w{bits}", target, f"BLOCK_N={bn}", c)


def compile_gemv2(target: str, m: int, n: int, k: int, g: int,
                  bounds: tuple[int, ...] = ()) -> Report:  # fmt: skip
    """Build the second-pass decode GEMV (M <= 2) at the config its launcher picks; `mma`
    reports that the loop stayed free of a matrix instruction, as designed (FMAs)."""
    from . import fast_host, fast_kernels

    hip = target == "gfx1201"
    cfg = fast_host.gemv2_config(m, n, k, g, bounds, sms=64 if hip else 132, hip=hip)
    sl = fast_host.prologue_slice(hip)
    sig = {
        "a_ptr": "*fp32", "rs_ptr": "*fp32", "qw_ptr": "*i32",
        "sc_ptr": "*fp16", "zp_ptr": "*u8", "bias_ptr": "*bf16", "ws_ptr": "*fp32",
        "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "KW": cfg.kw,
        "SPLIT_K": cfg.split_k, "RS": g // min(sl, g) if sl else 1,
        "ROT": False, "KROT": 1, "gi_ptr": None, "gc_ptr": None, "xs_ptr": None, "stride_xm": 0,
        "PRE": True, "PDL": False,
    }  # fmt: skip
    c = _compile(fast_kernels.gemv2_w4a16_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages)  # fmt: skip
    rep = _report("gemv2_w4a16_fma", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma})


def compile_gemv2_rot(target: str, m: int, n: int, k: int, g: int, bounds: tuple[int, ...] = (),
                      krot: int = 8) -> tuple[Report, object]:  # fmt: skip
    """Build the decode GEMV with the Givens layers inside (fourth pass; NVIDIA's pick) at the
    config its launcher picks; `mma` reports that the loop stayed free of a matrix instruction.
    Also returns the compiled kernel (its PTX, `cubin_usage`)."""
    from . import fast_host, fast_kernels

    cfg = fast_host.gemv2_config(m, n, k, g, bounds, sms=132, hip=target == "gfx1201")
    sig = {
        "a_ptr": "*bf16", "rs_ptr": "*fp32", "qw_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "bias_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
        "gi_ptr": "*i32", "gc_ptr": "*fp32", "xs_ptr": "*fp32", "stride_xm": "i32",
    }  # fmt: skip
    const = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "KW": cfg.kw,
        "SPLIT_K": cfg.split_k, "RS": 1, "ROT": True, "KROT": krot,
        "PRE": fast_host.GEMV2_ROT_PRE, "PDL": False,
    }  # fmt: skip
    c = _compile(fast_kernels.gemv2_w4a16_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages)  # fmt: skip
    rep = _report("gemv2_w4a16_rot", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma}), c


# The arguments before the constexprs of the GEMVs on the paired prologue output (the HFMA2 and
# the mma one): xr as int32 pairs, the int4 layer, split-K buffers, out, M N K, bounds.
_PAIRED_GEMV_SIG = {
    "a_ptr": "*i32", "qw_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
    "bias_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
    "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
}  # fmt: skip


def compile_gemv_h2(target: str, m: int, n: int, k: int, g: int, bounds: tuple[int, ...] = (),
                    hi: bool = False) -> tuple[Report, object]:  # fmt: skip
    """Build the ninth-pass HFMA2 decode GEMV (NVIDIA only: packed-fp16 PTX; `hi`: int5) at the
    config its launcher picks; `mma` reports that the loop stayed free of a matrix instruction.
    Also returns the compiled kernel (its `asm` for instruction counts)."""
    from . import decode_host, decode_kernels

    cfg = decode_host.h2_config(m, n, k, g, bounds, sms=132, bits=5 if hi else 4)
    sig = dict(_PAIRED_GEMV_SIG)
    const: dict[str, object] = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": 1 if m == 1 else 2, "BLOCK_N": cfg.block_n,
        "KW": cfg.kw, "SPLIT_K": cfg.split_k, "ASM": target != "gfx1201", "PDL": False,
        "HI": hi,
    }  # fmt: skip
    if hi:
        sig["qh_ptr"] = "*i32"
    else:
        const["qh_ptr"] = None
    c = _compile(decode_kernels.gemv_h2_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages)  # fmt: skip
    rep = _report("gemv_h2", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma}), c


def compile_gemv_mma(target: str, m: int, n: int, k: int, g: int, bounds: tuple[int, ...] = (),
                     hi: bool = False, maxnreg: int | None = None,
                     **kw: int) -> tuple[Report, object]:  # fmt: skip
    """Build the twelfth-pass mma.sync decode GEMV (NVIDIA only; `hi`: int5, the thirteenth
    pass) at its launcher's config (`decode_host.mma_config`, kw overriding it) and register
    cap (`decode_host.mma_maxnreg`, or `maxnreg`); `mma` reports the matrix instruction in the
    loop. Also returns the compiled kernel (its `asm`)."""
    from . import decode_host, decode_kernels

    bits = 5 if hi else 4
    cap = decode_host.mma_maxnreg(m, bits) if maxnreg is None else maxnreg
    cfg = decode_host.mma_config(m, n, k, g, bounds, 132, bits, **kw)
    sig = dict(_PAIRED_GEMV_SIG)
    const: dict[str, object] = {
        "HAS_BIAS": False, "G": g, "T": cfg.block_n, "SPLIT_K": cfg.split_k, "ASM": True,
        "NT": decode_host.mma_tiles(m), "HI": hi,
    }  # fmt: skip
    if hi:
        sig["qh_ptr"] = "*i32"
    else:
        const["qh_ptr"] = None
    aligned = (*(a for a in sig if a.endswith("_ptr")), "N", "K")
    c = _compile(decode_kernels.gemv_mma_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages, aligned, cap)  # fmt: skip
    return _report("gemv_mma", target, str(cfg), c, r"mma\.sync"), c


def compile_mx_gemv_mma(target: str, m: int, n: int, k: int, bounds: tuple[int, ...] = (),
                        act: int = 0, **kw: int) -> tuple[Report, object]:  # fmt: skip
    """Build the fourteenth-pass MXFP4 mma.sync decode GEMV (NVIDIA only) at its launcher's
    config (`mx_decode_host.mma_config`, kw overriding it) on activations `act` (the kernel's
    ACT: paired fp16, plain bf16 or fp16 rows); `mma` reports the matrix instruction in the
    loop. Also returns the compiled kernel (its `asm`)."""
    from . import mx_decode_host, mx_decode_kernels

    cfg = mx_decode_host.mma_config(m, n, k, bounds, 132, **kw)
    sig = {
        "a_ptr": "*i32", "qw_ptr": "*i32", "sc_ptr": "*i32", "bias_ptr": "*bf16",
        "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"HAS_BIAS": False, "T": cfg.block_n, "SPLIT_K": cfg.split_k, "ASM": True,
             "NT": cfg.block_m // 8, "U": cfg.unroll, "ACT": act}  # fmt: skip
    aligned = (*(a for a in sig if a.endswith("_ptr")), "N", "K")
    c = _compile(mx_decode_kernels.mx_gemv_mma_kernel, sig, const, target, cfg.num_warps, 1,
                 aligned, mx_decode_host.mma_band(m)[2])  # fmt: skip
    return _report("mx_gemv_mma", target, str(cfg), c, r"mma\.sync"), c


def cubin_usage(compiled: object) -> dict[str, int]:
    """The sm_90 build's resource usage as `cuobjdump --dump-resource-usage` reads its cubin
    (Triton's own copy of the tool): REG, STACK, SHARED, LOCAL ... by name."""
    import subprocess
    import tempfile
    from pathlib import Path

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])  # type: ignore[attr-defined]
        f.flush()
        usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True,
                               text=True, check=True).stdout  # fmt: skip
    return {key: int(v) for key, v in re.findall(r"([A-Z_]+):(\d+)", usage)}
