"""The detector's fast inference path (config EVAL.FAST_INFERENCE, tools/benchmark.py section `inference`):
backbones.optimize_for_inference applied to the parts of a detector that carry its convolution FLOPs.

    fast = optimize_detector_for_inference(model)   # a copy; `model` is not changed
    outputs = fast(batched_inputs)                  # as model.eval()(batched_inputs)

The copy has the affine norms of this project's convs folded into them (FrozenBN, eval-mode BN; Detectron2's own
conv + FrozenBN pairs are left to Inductor's freezing, which folds them when it compiles), its weights in
channels_last, and
torch.compile (Inductor, freezing) around the backbone trunk (the C4 trunk, or FPN's bottom-up trunk) and the C4
head's res5 (this plugin's detectors and Detectron2's built-in ones alike: the benchmark gives both the same
treatment) -- the modules whose inputs are dense tensors. The RPN, RoI pooling and the box predictor stay eager
(data-dependent shapes: proposals, NMS). On the CPU, RoIPool runs over the RoIs in torch.get_num_threads() threads:
torchvision's CPU kernel is serial, and each RoI's output is computed by the same kernel, so the values are the
same. Detection images vary in size: Dynamo compiles the first shape, then one dynamic-shape graph per varying
dimension (BENCHMARKS.md gives the compile times).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import torch
from detectron2.modeling.backbone.fpn import FPN
from detectron2.modeling.poolers import ROIPooler
from detectron2.modeling.roi_heads import Res5ROIHeads
from torch import nn
from torchvision.ops import RoIPool, roi_pool

from backbones.inference import InferenceModule, compile_or_warn, fold_norms_into_convs

__all__ = ["optimize_detector_for_inference", "DetectorPart", "ThreadedRoIPool", "compile_seconds"]


class DetectorPart(InferenceModule):
    """InferenceModule that answers for the module it wraps (size_divisibility, output_shape(), ...): the
    meta-architecture and FPN read those from the trunk."""

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)


class ThreadedRoIPool(nn.Module):
    """torchvision's RoIPool, the RoIs split into `threads` chunks pooled at once (its CPU kernel runs one RoI
    after another on one core; the op releases the GIL). Same values: every RoI is pooled by the same kernel."""

    def __init__(self, output_size, spatial_scale: float, threads: int):
        super().__init__()
        self.output_size, self.spatial_scale, self.threads = output_size, spatial_scale, threads

    def forward(self, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or self.threads < 2 or len(rois) < 2 * self.threads:
            return roi_pool(x, rois, self.output_size, self.spatial_scale)
        x = x.contiguous()  # the kernel reads NCHW; converted once here rather than once per chunk

        def pool(chunk: torch.Tensor) -> torch.Tensor:
            return roi_pool(x, chunk, self.output_size, self.spatial_scale)

        with ThreadPoolExecutor(self.threads) as pool_threads:
            return torch.cat(list(pool_threads.map(pool, rois.tensor_split(self.threads))))

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, threads={self.threads}"


def _thread_roi_pools(model: nn.Module) -> None:
    threads = torch.get_num_threads()
    for pooler in (m for m in model.modules() if isinstance(m, ROIPooler)):
        for i, level in enumerate(pooler.level_poolers):
            if type(level) is RoIPool:
                pooler.level_poolers[i] = ThreadedRoIPool(level.output_size, level.spatial_scale, threads)


def optimize_detector_for_inference(model: nn.Module, *, compile: bool = True) -> nn.Module:
    """A copy of the detector `model` for inference only (see the module docstring); outputs equal
    `model.eval()`'s within float tolerance. compile=False: folding, layout and the threaded RoIPool only. Where
    torch.compile cannot run (backbones.inference.compile_or_warn), one warning and the eager folded copy."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    compile = compile_or_warn(compile, device, "optimize_detector_for_inference: running the detector")
    net = fold_norms_into_convs(copy.deepcopy(model).eval().requires_grad_(False))
    if device.type == "cpu":
        _thread_roi_pools(net)

    def part(module: nn.Module) -> DetectorPart:
        return DetectorPart(module.to(memory_format=torch.channels_last), compile=compile, channels_last=True)

    if isinstance(net.backbone, FPN):  # the lateral and output convs are small; the trunk carries the FLOPs
        net.backbone.bottom_up = part(net.backbone.bottom_up)
    else:
        net.backbone = part(net.backbone)
    if isinstance(net.roi_heads, Res5ROIHeads):  # this plugin's C4 head and Detectron2's
        net.roi_heads.res5 = part(net.roi_heads.res5)
    return net


def compile_seconds(model: nn.Module) -> float:
    """Seconds spent compiling so far in the parts of an optimized detector (the calls that compiled a graph)."""
    return sum(m.compile_seconds for m in model.modules() if isinstance(m, DetectorPart))
