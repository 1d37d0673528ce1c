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

from .._contract import require
from . import (
    dequant,
    dequant_kernels,
    gemm_kernels,
    gemv_fma,
    gemv_fma_kernels,
    gemv_mma,
    gemv_mma_kernels,
    mx_gemm,
    mx_gemv,
    mx_gemv_mma,
    mx_gemv_mma_kernels,
    mx_repack,
    prologue,
    prologue_kernels,
    route,
)
from .gemm import a16, pick_config, pick_config_a8
from .launch import Config
from .mx_gemm_kernels import fp8_token_quant_kernel, mx_dequant_kernel, mx_gemm_kernel
from .mx_gemv_kernels import mx_gemv_kernel
from .precompile import amdgcn_meta
from .prologue import e4m3_bits, prologue_block_m, prologue_cols, prologue_warps

# The matrix instruction each mode must become (fp8 mode: fp8 WMMA, never a bf16 decomposition).
MX_MMA_PATTERNS = {
    ("gfx1201", "fp8"): r"v_wmma_f32_16x16x16_fp8_fp8",
    ("gfx1201", "a16"): r"v_wmma_f32_16x16x16_(f16|bf16)",
    ("sm90", "fp8"): r"(wgmma\.mma_async\S*e4m3\.e4m3|mma\.sync\S*e4m3\.e4m3)",
    ("sm90", "a16"): r"(wgmma\.mma_async\S*(f16|bf16)|mma\.sync\S*(f16|bf16))",
}


def _aot_build(
    fn: object,
    sig: dict[str, str],
    const: Mapping[str, object],
    target: str,
    warps: int,
    stages: int,
) -> object:
    import triton

    src = triton.compiler.ASTSource(
        fn=fn, signature={**sig, **dict.fromkeys(const, "constexpr")}, constexprs=const
    )
    opts = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=TARGETS[target][0], options=opts)


def _aot_report(name: str, target: str, cfg: str, compiled: object, mma: str) -> object:
    import re

    asm = compiled.asm["amdgcn" if target == "gfx1201" else "ptx"]  # type: ignore[attr-defined]
    lds = int(compiled.metadata.shared)  # type: ignore[attr-defined]
    found = re.search(mma, asm) is not None

    def meta(key: str) -> int:
        hit = re.search(rf"\.{key}:\s*(\d+)", asm)
        return int(hit.group(1)) if hit else 0

    if target == "gfx1201":
        vgprs, spills = meta("vgpr_count"), meta("vgpr_spill_count")
        scratch = meta("private_segment_fixed_size")
    else:  # PTX: `.local` declarations are the spills
        vgprs, spills, scratch = 0, len(re.findall(r"\.local\s", asm)), 0
    return Report(name, target, cfg, found, vgprs, spills, scratch, lds, TARGETS[target][1])


def compile_mx_gemm(
    target: str,
    m: int,
    n: int,
    k: int,
    act: mx_repack.ActMode,
    fold: bool = True,
    bounds: tuple[int, ...] = (),
) -> object:
    """Build the MXFP4 GEMM at the config the launcher picks on `target`; an `aot.Report`."""

    hip = target == "gfx1201"
    opk = 0 if act == "fp8" else 2
    cfg = mx_gemm.pick_config(m, n, k, bounds, opk, sms=64 if hip else 132, hip=hip)
    a_ty = "*fp8e4nv" if act == "fp8" else "*bf16"
    sig = {
        "a_ptr": a_ty, "asc_ptr": "*fp32", "qw_ptr": "*u8", "sc_ptr": "*u8", "cmax_ptr": "*i32",
        "bias_ptr": "*bf16", "out_ptr": "*fp32" if cfg.split_k > 1 else "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "b1": "i32", "b2": "i32",
        "split_k": "i32",
    }  # fmt: skip
    const = {
        "OPK": opk, "A_SCALED": act == "fp8", "FOLD": fold, "HAS_BIAS": False,
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "ATOMIC": cfg.split_k > 1,
        "GROUP_M": cfg.group_m, "IMPRECISE": mx_repack.FP8_PROMOTE if opk == 0 else None,
    }  # fmt: skip
    c = _aot_build(mx_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    name = f"mx_gemm_{act}" + ("" if fold else "_perblock")
    # Triton 3.9 lowers an fp8 dot below 64 rows on sm_90 to f16 mma.sync (exact e4m3 -> f16
    # converts): the decode GEMM is bandwidth-bound, so that is the instruction expected there.
    mode = "a16" if target == "sm90" and cfg.block_m < 64 else act
    return _aot_report(name, target, str(cfg), c, MX_MMA_PATTERNS[(target, mode)])


def compile_mx_dequant(target: str, n: int, k: int, rot: bool, dtype: str = "bf16",
                       bounds: tuple[int, ...] = (), fold: bool = False) -> object:  # fmt: skip
    """Build the prefill dequant (`mx_dequant_kernel`) at the launcher's config; an
    `aot.Report` (`mma`: the rotated kernel's matrix instruction). dtype "fp8": the e4m3 codes
    of `dequant8` (unrotated); fold: the rotated kernel's folded block scales."""

    out8 = dtype == "fp8"
    require(not (out8 and rot), "rot", "False with fp8 codes", rot)
    bn = mx_gemm.dequant_block_n(rot, target == "gfx1201")
    bn = mx_repack._block_n(bn, mx_repack._align(bounds)) if rot else bn
    w_ty = "fp8e4nv" if out8 else dtype
    sig = {
        "qw_ptr": "*u8", "sc_ptr": "*u8", "rot_hi_ptr": f"*{w_ty}", "rot_lo_ptr": f"*{w_ty}",
        "cmax_ptr": "*i32", "w_ptr": f"*{w_ty}", "s8_ptr": "*fp32", "N": "i32", "K": "i32",
        "b1": "i32", "b2": "i32", "per": "i32", "c1": "i32", "c2": "i32",
    }  # fmt: skip
    const = {"G": 128 if rot else 64, "BLOCK_N": bn, "ROT": rot, "FOLD": fold, "OUT8": out8}
    c = _aot_build(mx_dequant_kernel, sig, const, target, mx_gemm.DEQUANT_WARPS, 2)
    mma = MX_MMA_PATTERNS[(target, "a16")] if rot else r"(?!)"  # the plain kernel has none
    name = "mx_dequant" + ("_rot" if rot else "") + ("_fold" if fold else "")
    name += "8" if out8 else ""
    return _aot_report(name, target, f"BLOCK_N={bn}", c, mma)


def compile_fp8_quant(target: str, k: int) -> object:
    """Build the per-token e4m3 quantizer (no matrix instruction: `mma` reports False)."""

    bk = min(mx_repack.QUANT_BLOCK_K, max(128, 1 << (k - 1).bit_length()))
    sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "K": "i32", "stride_xr": "i32"}
    const = {"BLOCK_K": bk, "E4M3_BITS": prologue.e4m3_bits(target == "gfx1201")}
    c = _aot_build(fp8_token_quant_kernel, sig, const, target, 4, 1)
    return _aot_report("fp8_token_quant", target, f"BLOCK_K={bk}", c, r"(?!)")


def compile_mx_gemv(target: str, m: int, n: int, k: int, bounds: tuple[int, ...] = (),
                    block_n: int = 0, num_warps: int = 0, unroll: int = 0) -> object:  # fmt: skip
    """Build the GEMV at the config its launcher picks on `target`; an `aot.Report` whose `mma`
    says the loop stayed free of a matrix instruction, as designed."""

    hip = target == "gfx1201"
    cfg = mx_gemv.gemv_config(
        m, n, k, bounds, 64 if hip else 132, block_n, num_warps, 0, unroll, hip
    )
    sig = {
        "a_ptr": "*bf16", "qw_ptr": "*i32", "sc_ptr": "*u8", "bias_ptr": "*bf16",
        "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"HAS_BIAS": False, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
             "SPLIT_K": cfg.split_k, "ASM": not hip, "U": cfg.unroll, "BF16": True,
             "PF": cfg.prefetch, "EVEN_K": k % 64 == 0}  # fmt: skip
    c = _aot_build(mx_gemv_kernel, sig, const, target, cfg.num_warps, 1)
    rep = _aot_report("mx_gemv", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma})  # type: ignore[attr-defined]


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
    c = _compile(gemm_kernels.w4a16_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    name = "w4a16_gemm_zp_rowsum" if zp_rowsum or cfg.rowsum else "w4a16_gemm"
    return _report(name, target, str(cfg), c)


def compile_prologue(target: str, m: int, g: int) -> Report:
    """Build the rotate + scale prologue at the block the launcher picks for M rows (at the
    GEMV's M, `route.band`, its fp32 nibble-scaled output)."""

    block_m = prologue_block_m(m, hip=target == "gfx1201")
    scaled = route.band(m, g) == "gemv"
    sig = {
        "x_ptr": "*bf16", "rot_hi_ptr": "*bf16", "rot_lo_ptr": "*bf16",
        "xr_ptr": "*fp32" if scaled else "*fp16",
        "rs_ptr": "*fp32", "M": "i32", "K": "i32", "stride_xm": "i32",
    }  # fmt: skip
    const = {"G": g, "BLOCK_M": block_m, "NIBBLE_SCALED": scaled}
    c = _compile(
        prologue_kernels.rotate_scale_kernel, sig, const, target, prologue_warps(block_m), 1
    )
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
    c = _compile(prologue_kernels.givens_rotate_kernel, sig, const, target, 4, 1)
    return _report("givens_rotate", target, f"BLOCK_M={block_m}", c)


def compile_givens_paired(target: str, m: int, g: int = 128, krot: int = 8,
                          rows: int = -1) -> tuple[Report, object]:  # fmt: skip
    """Build the paired records prologue (`prologue_kernels.givens_paired_kernel`, NVIDIA's mma
    and HFMA2 GEMVs' input) at the rows a program `prologue.givens_block_m` picks for M
    (`rows` as its); no matrix instruction. Also returns the compiled kernel."""

    block_m = prologue.givens_block_m(m, rows)
    sig = {
        "x_ptr": "*bf16", "gi_ptr": "*i32", "gc_ptr": "*fp32", "xr_ptr": "*fp16",
        "M": "i32", "K": "i32", "stride_xm": "i32",
    }  # fmt: skip
    const = {"KROT": krot, "G": g, "BLOCK_M": block_m, "PSCALE": 1.0, "PDL": False,
             "PAIRED": True}  # fmt: skip
    aligned = (*(a for a in sig if a.endswith("_ptr")), "K", "stride_xm")
    c = _compile(prologue_kernels.givens_paired_kernel, sig, const, target,
                 prologue.GIVENS_PAIRED_WARPS, 1, aligned)  # fmt: skip
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
    c = _compile(gemm_kernels.w4a8_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
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
    c = _compile(prologue_kernels.rotate_quant_kernel, sig, const, target, warps, 1)
    name = f"rotate_quant_{fmt}_{'token' if token else 'group'}"
    return _report(name, target, f"BLOCK_M={block_m} COLS={cols} warps={warps}", c)


def compile_dequant(target: str, n: int, k: int, g: int, bits: int = 4,
                    bounds: tuple[int, ...] = ()) -> Report:  # fmt: skip
    """Build the prefill dequantize + rotate kernel; `mma` = the rotation dot on the matrix unit."""

    bn = dequant.dequant_block_n(target == "gfx1201")
    sig = {
        "qw_ptr": "*i32", "qh_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "rot_hi_ptr": "*bf16", "rot_lo_ptr": "*bf16", "w_ptr": "*fp16",
        "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"G": g, "BLOCK_N": bn, "BITS": bits, "NSPLIT": 4}
    c = _compile(dequant_kernels.dequant_rotate_kernel, sig, const, target,
                 dequant.dequant_warps(target == "gfx1201"),
                 dequant.dequant_stages(target == "gfx1201"))  # fmt: skip
    return _report(f"dequant_rotate_w{bits}", target, f"BLOCK_N={bn}", c)


def compile_gemv2(target: str, m: int, n: int, k: int, g: int,
                  bounds: tuple[int, ...] = ()) -> Report:  # fmt: skip
    """Build the FMA decode GEMV (M <= 2) at the config its launcher picks; `mma`
    reports that the loop stayed free of a matrix instruction, as designed (FMAs)."""

    hip = target == "gfx1201"
    cfg = gemv_fma.gemv2_config(m, n, k, g, bounds, sms=64 if hip else 132, hip=hip)
    sl = prologue.prologue_slice(hip)
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
    c = _compile(gemv_fma_kernels.gemv2_w4a16_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages)  # fmt: skip
    rep = _report("gemv2_w4a16_fma", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma})


def compile_gemv2_rot(target: str, m: int, n: int, k: int, g: int, bounds: tuple[int, ...] = (),
                      krot: int = 8) -> tuple[Report, object]:  # fmt: skip
    """Build the decode GEMV with the Givens layers inside (H200 2026-12-02; NVIDIA's pick) at the
    config its launcher picks; `mma` reports that the loop stayed free of a matrix instruction.
    Also returns the compiled kernel (its PTX, `cubin_usage`)."""

    cfg = gemv_fma.gemv2_config(m, n, k, g, bounds, sms=132, hip=target == "gfx1201")
    sig = {
        "a_ptr": "*bf16", "rs_ptr": "*fp32", "qw_ptr": "*i32", "sc_ptr": "*fp16", "zp_ptr": "*u8",
        "bias_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
        "gi_ptr": "*i32", "gc_ptr": "*fp32", "xs_ptr": "*fp32", "stride_xm": "i32",
    }  # fmt: skip
    const = {
        "HAS_BIAS": False, "G": g, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "KW": cfg.kw,
        "SPLIT_K": cfg.split_k, "RS": 1, "ROT": True, "KROT": krot,
        "PRE": gemv_fma.GEMV2_ROT_PRE, "PDL": False,
    }  # fmt: skip
    c = _compile(gemv_fma_kernels.gemv2_w4a16_kernel, sig, const, target, cfg.num_warps,
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
    """Build the HFMA2 decode GEMV (NVIDIA only: packed-fp16 PTX; `hi`: int5) at the
    config its launcher picks; `mma` reports that the loop stayed free of a matrix instruction.
    Also returns the compiled kernel (its `asm` for instruction counts)."""

    cfg = gemv_fma.h2_config(m, n, k, g, bounds, sms=132, bits=5 if hi else 4)
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
    c = _compile(gemv_fma_kernels.gemv_h2_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages)  # fmt: skip
    rep = _report("gemv_h2", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return Report(**{**rep.__dict__, "mma": not rep.mma}), c


def compile_gemv_mma(target: str, m: int, n: int, k: int, g: int, bounds: tuple[int, ...] = (),
                     hi: bool = False, maxnreg: int | None = None,
                     **kw: int) -> tuple[Report, object]:  # fmt: skip
    """Build the mma.sync decode GEMV (NVIDIA only; `hi`: int5, since
    2026-12-04) at its launcher's config (`gemv_mma.mma_config`, kw overriding it) and register
    cap (`gemv_mma.mma_maxnreg`, or `maxnreg`); `mma` reports the matrix instruction in the
    loop. Also returns the compiled kernel (its `asm`)."""

    bits = 5 if hi else 4
    cap = gemv_mma.mma_maxnreg(m, bits) if maxnreg is None else maxnreg
    cfg = gemv_mma.mma_config(m, n, k, g, bounds, 132, bits, **kw)
    sig = dict(_PAIRED_GEMV_SIG)
    const: dict[str, object] = {
        "HAS_BIAS": False, "G": g, "T": cfg.block_n, "SPLIT_K": cfg.split_k, "ASM": True,
        "NT": gemv_mma.mma_tiles(m), "HI": hi, "CHUNKED": gemv_mma.mma_chunks(m) > 1,
    }  # fmt: skip
    if hi:
        sig["qh_ptr"] = "*i32"
    else:
        const["qh_ptr"] = None
    aligned = (*(a for a in sig if a.endswith("_ptr")), "N", "K")
    c = _compile(gemv_mma_kernels.gemv_mma_kernel, sig, const, target, cfg.num_warps,
                 cfg.num_stages, aligned, cap)  # fmt: skip
    return _report("gemv_mma", target, str(cfg), c, r"mma\.sync"), c


def compile_mx_gemv_mma(target: str, m: int, n: int, k: int, bounds: tuple[int, ...] = (),
                        act: int = 0, **kw: int) -> tuple[Report, object]:  # fmt: skip
    """Build the MXFP4 mma.sync decode GEMV (NVIDIA only) at its launcher's
    config (`mx_gemv_mma.mma_config`, kw overriding it) on activations `act` (the kernel's
    ACT: paired fp16, plain bf16 or fp16 rows); `mma` reports the matrix instruction in the
    loop. Also returns the compiled kernel (its `asm`)."""

    cfg = mx_gemv_mma.mma_config(m, n, k, bounds, 132, **kw)
    sig = {
        "a_ptr": "*i32", "qw_ptr": "*i32", "sc_ptr": "*i32", "bias_ptr": "*bf16",
        "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"HAS_BIAS": False, "T": cfg.block_n, "SPLIT_K": cfg.split_k, "ASM": True,
             "NT": cfg.block_m // 8, "U": cfg.unroll, "ACT": act,
             "CHUNKED": mx_gemv_mma.mma_chunks(m) > 1}  # fmt: skip
    aligned = (*(a for a in sig if a.endswith("_ptr")), "N", "K")
    c = _compile(mx_gemv_mma_kernels.mx_gemv_mma_kernel, sig, const, target, cfg.num_warps, 1,
                 aligned, mx_gemv_mma.mma_band(m)[2])  # fmt: skip
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
