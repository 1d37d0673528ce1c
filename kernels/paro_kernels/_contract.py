"""Shape/dtype contract checks shared by every host-side op."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def require(cond: bool, arg: str, expected: object, got: object) -> None:
    """Raise ValueError naming `arg` with the expected and actual value unless `cond` holds."""
    if not cond:
        raise ValueError(f"{arg}: expected {expected}, got {got}")


def check_tensor(
    t: object,
    arg: str,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    shape: Sequence[int | None] | None = None,
    ndim: int | None = None,
) -> torch.Tensor:
    """Check that `t` is a tensor with the given dtype(s) and shape (None = any size)."""
    require(isinstance(t, torch.Tensor), arg, "a torch.Tensor", type(t).__name__)
    assert isinstance(t, torch.Tensor)
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        require(t.dtype in allowed, f"{arg}.dtype", " or ".join(map(str, allowed)), t.dtype)
    if ndim is not None:
        require(t.dim() == ndim, f"{arg}.ndim", ndim, f"{t.dim()} (shape {list(t.shape)})")
    if shape is not None:
        want = ["*" if s is None else s for s in shape]
        ok = t.dim() == len(shape) and all(
            s is None or s == g for s, g in zip(shape, t.shape, strict=True)
        )
        require(ok, f"{arg}.shape", want, list(t.shape))
    return t


def check_multiple(value: int, of: int, arg: str) -> None:
    """Check that an integer size is a positive multiple of `of`."""
    require(value > 0 and value % of == 0, arg, f"a positive multiple of {of}", value)
