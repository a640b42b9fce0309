"""The fast inference path: a frozen copy of a model with its affine norms folded into the convolutions, in
channels_last, compiled by torch.compile with Inductor's freezing where the compiler is available.

    fast = optimize_for_inference(model)        # a copy; `model` is not changed
    logits = fast(x)                            # x as for `model` (NCHW is fine), no autograd

What each step brings (tools/benchmark.py, section `inference`; BENCHMARKS.md): folding removes a pass over every
activation; channels_last is the faster CPU layout for oneDNN convolutions; Inductor's freezing treats the weights as
constants, so it folds what folding left, fuses conv + bias + ReLU (+ the residual add) and prepacks the weights for
oneDNN. The compiled copy is a snapshot of the weights: optimize again after changing them. Compiling costs
seconds to a minute at the first call and again at each new input shape (Dynamo then compiles a dynamic-shape
graph once), so the path pays off on a whole evaluation, not on a handful of images.
"""

from __future__ import annotations

import copy
import time
import warnings

import torch
from torch import nn

from .blocks import Conv2dNorm

__all__ = ["fold_norms_into_convs", "compile_unavailable_reason", "compile_or_warn", "optimize_for_inference",
           "InferenceModule"]


def fold_norms_into_convs(model: nn.Module) -> nn.Module:
    """Replace, in place, every Conv2dNorm whose norm is an affine map now (FrozenBN; BN / SyncBN in eval mode) by
    a plain nn.Conv2d holding the folded weight and bias (Conv2dNorm.folded_weight_and_bias: the same function).
    Norms that are not affine maps (GN, BN in training) and convolutions without a norm stay as they are.
    Returns `model`. The new convs' parameters do not require gradients: this is an inference transform."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv2dNorm) and child.norm is not None and child._foldable():
                with torch.no_grad():
                    weight, bias = child.folded_weight_and_bias()
                conv = nn.Conv2d(child.in_channels, child.out_channels, child.kernel_size, stride=child.stride,
                                 padding=child.padding, dilation=child.dilation, groups=child.groups, bias=True,
                                 padding_mode=child.padding_mode, device=weight.device, dtype=weight.dtype)
                conv.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
                conv.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
                parent.add_module(name, conv)
    return model


def compile_unavailable_reason(device: torch.device | str = "cpu") -> str | None:
    """Why torch.compile (Inductor) cannot compile for `device` here, or None when it can: Dynamo must support this
    Python, the CPU backend needs a C++ compiler, the CUDA backend needs Triton."""
    device = torch.device(device)
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile does not support this Python version"
    if device.type == "cpu":
        from torch._inductor import cpp_builder
        try:
            cpp_builder.get_cpp_compiler()
        except Exception as e:  # noqa: BLE001  (any failure to find one means: no compiler)
            return f"no C++ compiler for Inductor's CPU backend ({type(e).__name__}: {e})".splitlines()[0]
        return None
    if device.type == "cuda":
        from torch.utils._triton import has_triton
        return None if has_triton() else "Triton is not installed (Inductor's CUDA backend needs it)"
    return f"Inductor is not used for {device.type} devices here"


class InferenceModule(nn.Module):
    """Calls `module` without autograd, 4-D inputs converted to channels_last when `channels_last`, through
    torch.compile (Inductor, freezing) when `compile`. A compile that fails (at the first call or at a recompile for
    a new input shape) is reported in one warning and the eager module is used from then on. `compile_seconds`:
    the wall time of the calls that compiled a graph (the first, and each recompile), summed."""

    def __init__(self, module: nn.Module, *, compile: bool, channels_last: bool):
        super().__init__()
        self.module = module
        self.channels_last = channels_last
        self.compile_seconds = 0.0
        # kept outside the module tree: the compiled wrapper shares `module`'s parameters and would list them twice
        self.__dict__["_compiled"] = torch.compile(module) if compile else None

    @property
    def compiled(self) -> bool:
        return self.__dict__["_compiled"] is not None

    def _convert(self, x):
        if self.channels_last and isinstance(x, torch.Tensor) and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def forward(self, *args, **kwargs):
        args = tuple(self._convert(a) for a in args)
        with torch.no_grad():  # Inductor's freezing applies to graphs without autograd
            compiled = self.__dict__["_compiled"]
            if compiled is None:
                return self.module(*args, **kwargs)
            graphs = _compiled_graphs()
            t0 = time.perf_counter()
            try:
                # freezing is read by Dynamo (weights as constants) as well as by Inductor, so it is set for the
                # call, not passed as a compile option (which only Inductor sees: no prepacking, no fusion)
                from torch._inductor import config as inductor_config  # on use: not at `import backbones`

                with inductor_config.patch(freezing=True):
                    out = compiled(*args, **kwargs)
            except torch._dynamo.exc.BackendCompilerFailed as e:
                warnings.warn(f"optimize_for_inference: torch.compile failed ({str(e).splitlines()[0]}); running "
                              f"{type(self.module).__name__} eagerly (folded, channels_last) from now on",
                              stacklevel=2)
                self.__dict__["_compiled"] = None
                return self.module(*args, **kwargs)
            if _compiled_graphs() != graphs:  # this call compiled (first shape, or a recompile)
                self.compile_seconds += time.perf_counter() - t0
            return out


def _compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far (its own counter)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def optimize_for_inference(model: nn.Module, *, compile: bool = True, channels_last: bool = True) -> InferenceModule:
    """A copy of `model` for inference only: eval mode, no gradients, affine norms folded into their convolutions
    (fold_norms_into_convs), weights in channels_last, and torch.compile with Inductor's freezing where
    compile_unavailable_reason() is None (else one warning naming the reason, and the folded eager copy).

    Outputs equal `model.eval()`'s within float tolerance (summation order differs: folding, layout, fusion).
    compile=False: folding and layout only (no compile time; what an interactive session wants)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    net = fold_norms_into_convs(copy.deepcopy(model).eval().requires_grad_(False))
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    compile = compile_or_warn(compile, device, f"optimize_for_inference: running {type(model).__name__}")
    return InferenceModule(net, compile=compile, channels_last=channels_last)


def compile_or_warn(compile: bool, device: torch.device, what: str) -> bool:
    """`compile`, unless compile_unavailable_reason(device) gives a reason: then one warning, `what` + "eagerly", and
    False."""
    reason = compile_unavailable_reason(device) if compile else None
    if reason is not None:
        warnings.warn(f"not compiling ({reason}); {what} eagerly (norms folded, channels_last)", stacklevel=3)
    return compile and reason is None
