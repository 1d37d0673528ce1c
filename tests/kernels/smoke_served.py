"""Device smoke: the errors of the Givens-inside GEMV and the 8-bit prefill GEMMs on the GPU
test cases (written 2026-12-02 for those paths).

    python tests/kernels/smoke_served.py   (PYTHONPATH: kernels, tests/kernels)

Prints, per case: the Givens-inside GEMV (M = 1..2) against the fp64 W4A16 reference, and the
8-bit prefill GEMMs (fp8 / int8, int4 and int5) against the format's fp64 W4A8 reference (group
int8 and fp8 activations) and the W4A16 one, beside the format's own act-quant noise.
"""

import torch
from _triton_cases import (
    W4A16_CASES,
    bias,
    hi_planes,
    merged_layer,
    merged_layer_bits,
    packed,
    reference,
    reference_a8,
    rel,
    runs,
)
from paro_kernels import reference as ref
from paro_kernels.triton import dequant, repack, route


def main() -> None:
    """Print every error line (module doc)."""
    for k, sizes, g in W4A16_CASES:
        parts = merged_layer(k, sizes, g, seed=k + len(sizes), bias=True)
        prep = repack.prepare(*packed(parts), runs(parts), g, device="cuda")
        for m in (1, 2):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(torch.bfloat16)
            y = route.w4a16_linear(
                x.cuda(),
                prep.rot_hi,
                prep.rot_lo,
                prep.qweight,
                prep.scales,
                prep.zeros,
                prep.bounds,
                g,
                bias(parts).cuda(),
                prep.gv_idx,
                prep.gv_coef,
                path="gemv",
            )
            print(
                f"rot2 k={k} sizes={sizes} g={g} m={m}: rel {rel(y, reference(x, parts, g)):.2e}",
                flush=True,
            )
    for k, sizes, g in [
        (128, [288], 128),
        (640, [992], 64),
        (1536, [224, 128], 64),
        (1024, [512, 128, 128], 128),
        (2304, [2048, 256], 128),
    ]:
        for bits in (4, 5):
            if bits == 5 and sum(sizes) % 32:
                continue
            parts = merged_layer_bits(k, sizes, g, bits, seed=k + len(sizes) + bits)
            prep = repack.prepare(
                *packed(parts), runs(parts), g, device="cuda", bits=bits, **hi_planes(parts)
            )
            x = torch.randn(300, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
            if bits == 4:
                r16 = reference(x, parts, g)
            else:
                r16 = torch.cat(
                    [ref.paro_linear_ref(x, *p.args(), 5, g, p.bias, **p.hi()) for p in parts], 1
                )
            ra = {f: reference_a8(x, parts, g, bits, f, "group") for f in ("int8", "fp8")}
            line = [
                f"w8 k={k} sizes={sizes} g={g} bits={bits}:",
                f"format noise int8 {rel(ra['int8'], r16):.2e} fp8 {rel(ra['fp8'], r16):.2e}",
            ]
            for kind in ("int8", "fp8"):
                y = dequant.w8_linear(prep, x.cuda(), bias(parts).cuda(), kind)
                line.append(
                    f"{kind}: vs a8-int8 {rel(y, ra['int8']):.2e} vs a8-fp8 "
                    f"{rel(y, ra['fp8']):.2e} vs a16 {rel(y, r16):.2e}"
                )
            w = dequant.dequant_rotate(prep, dtype=torch.bfloat16)
            y = dequant.dequant_linear(x.cuda(), w, bias(parts).cuda())
            line.append(
                f"bf16-dequant: vs a8-int8 {rel(y, ra['int8']):.2e} vs a16 {rel(y, r16):.2e}"
            )
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
