"""Mult-adds and parameters of a model.

The paper's "FLOPs" are multiply-adds of conv and fc layers (Table 1: ResNet-50 3.8e9 at 224x224); by default
only those operators are counted, as there, with torch's own operator counter (torch.utils.flop_counter, which
counts exactly the conv / matmul family) on *meta* tensors: shapes only, no arithmetic, so a detector-sized image
costs milliseconds instead of seconds of real convolution (paper-scale estimates, `main_job.py --dry-run`).
`conv_fc_only=False` adds norm, pooling and upsampling as fvcore counts them (a real forward, traced).
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


def _zero_image(model: nn.Module, input_size: tuple[int, int, int], device=None) -> torch.Tensor:
    """A batch of one zero image on the model's device (or `device`) in its parameters' dtype."""
    param = next(model.parameters(), None)
    return torch.zeros(1, *input_size, device=device or (param.device if param is not None else "cpu"),
                       dtype=param.dtype if param is not None else torch.float32)


def _conv_fc_macs(model: nn.Module, input_size: tuple[int, int, int]) -> tuple[int, dict[str, int]]:
    """Conv / fc mult-adds of one forward, counted by torch's FlopCounterMode on meta copies of the parameters and
    buffers (torch.func.functional_call: the model itself is untouched and nothing the size of its weights is
    allocated). FlopCounterMode counts 2 FLOPs per multiply-add."""
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    meta = {name: torch.empty_like(t, device="meta")
            for name, t in (*model.named_parameters(), *model.named_buffers())}
    x = _zero_image(model, input_size, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        functional_call(model, meta, (x,), tie_weights=True, strict=True)
    counts = counter.get_flop_counts()  # keys: "Global", "<RootClass>", "<RootClass>.<child>", ...
    root = type(model).__name__
    by_module = {name: sum(counts.get(f"{root}.{name}", {}).values()) // 2 for name, _ in model.named_children()}
    return counter.get_total_flops() // 2, by_module


def _fvcore_macs(model: nn.Module, input_size: tuple[int, int, int], conv_fc_only: bool) -> tuple[int, dict]:
    """fvcore's count of a traced real forward (norms, pools and upsampling too unless `conv_fc_only`)."""
    from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(model, _zero_image(model, input_size))
    if conv_fc_only:
        # A zero-count handle, not None: fvcore 0.1.5 ignores None for ops that have a default handle.
        analysis.set_op_handle(**{op: _count_nothing for op in _NON_CONV_FC_OPS})
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    total = int(analysis.total())
    return total, {name: int(v) for name, v in analysis.by_module().items() if name and "." not in name}


def _real_forward_error(model: nn.Module, input_size: tuple[int, int, int]) -> RuntimeError | None:
    """The error a real forward on one zero image raises (for the message only; None if it runs)."""
    try:
        with torch.no_grad():
            model(_zero_image(model, input_size))
    except RuntimeError as err:
        return err
    return None


def complexity(model: nn.Module, input_size: tuple[int, int, int] = (3, 224, 224), *,
               conv_fc_only: bool = True) -> Complexity:
    """Count mult-adds of one forward pass on a single input of `input_size` (C, H, W), and parameters.

    conv_fc_only: count only conv / linear / matmul ops as the paper does; False adds norm, pooling and upsampling.
    """
    if not (isinstance(input_size, (tuple, list)) and len(input_size) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in input_size)):
        raise ValueError(f"input_size is (channels, height, width) of one image, three positive integers, "
                         f"got {input_size!r}")
    input_size = tuple(input_size)
    was_training = model.training
    model.eval()
    try:
        if conv_fc_only:
            total, by_module = _conv_fc_macs(model, input_size)
        else:
            total, by_module = _fvcore_macs(model, input_size, conv_fc_only=False)
    except RuntimeError as err:  # too small an image for the kernels / pools, or the wrong channel count
        err = _real_forward_error(model, input_size) or err  # meta kernels say less ("Invalid channel dimensions")
        raise ValueError(f"the model cannot run on one image of size {input_size} (C, H, W): "
                         f"{str(err).splitlines()[0]}") from None
    finally:
        model.train(was_training)
    params = sum(p.numel() for p in model.parameters())
    return Complexity(macs=total, params=params, by_module=by_module)
