"""Mult-adds and parameters of a model (fvcore's operator counting underneath).

The paper's "FLOPs" are multiply-adds of conv and fc layers (Table 1: ResNet-50 3.8e9 at 224x224); by default
only those operators are counted, as there. fvcore counts one multiply-add as one "flop".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Complexity", "complexity"]

# Operators that are *not* conv/fc but which fvcore counts by default: switched off to match the paper.
_NON_CONV_FC_OPS = (
    "aten::batch_norm", "aten::group_norm", "aten::layer_norm", "aten::instance_norm",
    "aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::adaptive_avg_pool2d", "aten::grid_sampler",
)


def _count_nothing(inputs, outputs) -> Counter:
    return Counter()


@dataclass(frozen=True)
class Complexity:
    macs: int  # multiply-adds ("FLOPs" in the paper)
    params: int  # all parameters (trainable or frozen), buffers excluded
    by_module: dict[str, int]  # mult-adds per top-level child (stem, res2, ..., fc)

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def mparams(self) -> float:
        return self.params / 1e6


def complexity(model: nn.Module, input_size: tuple[int, int, int] = (3, 224, 224), *,
               conv_fc_only: bool = True) -> Complexity:
    """Count mult-adds of one forward pass on a single input of `input_size` (C, H, W), and parameters.

    conv_fc_only: count only conv / linear / matmul ops as the paper does; False adds norm, pooling and upsampling.
    """
    from fvcore.nn import FlopCountAnalysis

    if not (isinstance(input_size, (tuple, list)) and len(input_size) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in input_size)):
        raise ValueError(f"input_size is (channels, height, width) of one image, three positive integers, "
                         f"got {input_size!r}")
    param = next(model.parameters(), None)
    x = torch.zeros(1, *input_size, device=param.device if param is not None else "cpu",
                    dtype=param.dtype if param is not None else torch.float32)
    was_training = model.training
    model.eval()
    try:
        analysis = FlopCountAnalysis(model, x)
        if conv_fc_only:
            # A zero-count handle, not None: fvcore 0.1.5 ignores None for ops that have a default handle.
            analysis.set_op_handle(**{op: _count_nothing for op in _NON_CONV_FC_OPS})
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
        try:
            total = int(analysis.total())
        except RuntimeError as err:  # too small an image for the kernels / pools, or the wrong channel count
            raise ValueError(f"the model cannot run on one image of size {tuple(input_size)} (C, H, W): "
                             f"{str(err).splitlines()[0]}") from None
        by_module = {name: int(v) for name, v in analysis.by_module().items() if name and "." not in name}
    finally:
        model.train(was_training)
    params = sum(p.numel() for p in model.parameters())
    return Complexity(macs=total, params=params, by_module=by_module)
