"""Mixed precision, one definition for the profiler and the executor (`--precision`).

bf16 is what GPU users train with: the layers run under `torch.autocast(device_type,
dtype=torch.bfloat16)`, so matrix products compute in bfloat16 while the weights, their
gradients and AdamW's state stay float32 (the master weights); the loss is computed in float32.
Activations that leave a stage (sent to the next one) or a frozen prefix (cached by AutoCache)
are rounded to bfloat16, half the bytes of float32, wherever they are produced, so the profile's
boundary bytes, the pipeline's transfers and the cache all hold the same values. The layer that
takes one in computes on it in float32, the weights' dtype, as the unsplit model under autocast
holds its residual stream: a bfloat16 input would keep the whole residual in bfloat16.

    with compute(device, "bf16"):
        hidden = boundary(layers(received(x, "bf16")), "bf16")   # unchanged under fp32

fp32 leaves everything as it was: no autocast, no casts. CPU autocast supports bfloat16, so the
same code runs (and is tested) on CPU; on CUDA the device type comes from the tensors' device.
"""

from __future__ import annotations

import contextlib

import torch

from pipeplan.formats import Precision

BOUNDARY_DTYPE: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def compute(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager:
    """The context the layers run in: bfloat16 autocast on `device`'s type under bf16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def boundary(x: torch.Tensor, precision: Precision) -> torch.Tensor:
    """An activation as it crosses a stage boundary or enters the cache: floating values in
    the precision's boundary dtype (token ids and other integers pass unchanged)."""
    if precision == "fp32" or not x.is_floating_point():
        return x
    return x.to(BOUNDARY_DTYPE[precision])


def received(x: torch.Tensor, precision: Precision) -> torch.Tensor:
    """An activation as a layer takes it from a stage boundary or the cache: floating values
    in float32, the parameters' dtype (token ids and other integers pass unchanged). Found by
    the sixty-third round: a stage fed bfloat16 added its residual in bfloat16, and a bf16
    run's held-out accuracy differed from its export's under autocast by a token."""
    if precision == "fp32" or not x.is_floating_point():
        return x
    return x.float()
