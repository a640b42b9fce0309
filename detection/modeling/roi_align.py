"""RoIAlign whose backward runs through ATen's vectorised `grid_sample` backward, forward unchanged.

torchvision's CPU roi_align backward recomputes the bilinear weights and adds each sample's gradient one scalar at
a time; at the main job's scale it was the largest cost after the convolutions (tools/benchmark.py main_job). The
same samples, written as a bilinear `grid_sample` grid per (image, sampling grid), give the input gradient from
ATen's vectorised kernel. The forward stays torchvision's (it is fast). Semantics are torchvision's kernel
exactly: RoI corners scaled (and shifted by -0.5 when `aligned`), `sampling_ratio` points per bin side (0: ceil of
the bin size), samples beyond one pixel outside the map contribute 0, samples within it are clamped to the border,
bins average their samples (tests compare gradients with torchvision's in float64).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from detectron2.layers import ROIAlign
from detectron2.modeling.poolers import ROIPooler
from torch import nn
from torchvision.ops import roi_align

__all__ = ["FastBackwardROIAlign", "use_fast_backward_roi_align", "sampling_groups"]


def _axis(start: torch.Tensor, size: torch.Tensor, bins: int, grid: int, limit: int):
    """Sample coordinates (k, bins, grid) along one axis, clamped to [0, limit - 1], and whether each is used."""
    steps = (torch.arange(bins, device=start.device, dtype=start.dtype)[:, None]
             + (torch.arange(grid, device=start.device, dtype=start.dtype)[None, :] + 0.5) / grid)
    pos = start[:, None, None] + size[:, None, None] / bins * steps[None]
    valid = (pos >= -1.0) & (pos <= limit)
    return pos.clamp(0, limit - 1), valid


def sampling_groups(rois: torch.Tensor, feature_hw: tuple[int, int], output_size: tuple[int, int],
                    spatial_scale: float, sampling_ratio: int, aligned: bool, dtype: torch.dtype
                    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None, torch.Tensor | None, int, int]]:
    """RoIs grouped by (image, samples per bin side): (image, RoI indices, grid (1, k*ph*gh, pw*gw, 2) for
    grid_sample with align_corners=True, mask (k, ph, gh, pw, gw), gh, gw). Empty RoIs come with grid None."""
    h, w = feature_hw
    ph, pw = output_size
    rois = rois.to(dtype)
    offset = 0.5 if aligned else 0.0
    x1, y1 = rois[:, 1] * spatial_scale - offset, rois[:, 2] * spatial_scale - offset
    rw, rh = rois[:, 3] * spatial_scale - offset - x1, rois[:, 4] * spatial_scale - offset - y1
    if not aligned:  # the legacy kernel forces RoIs to be at least 1x1
        rw, rh = rw.clamp(min=1.0), rh.clamp(min=1.0)
    if sampling_ratio > 0:
        gh_all = gw_all = torch.full((len(rois),), sampling_ratio, dtype=torch.long, device=rois.device)
    else:
        gh_all, gw_all = torch.ceil(rh / ph).long(), torch.ceil(rw / pw).long()
    keys = torch.stack([rois[:, 0].long(), gh_all, gw_all], 1)
    for b, gh, gw in torch.unique(keys, dim=0).tolist():
        idx = torch.nonzero((keys == keys.new_tensor([b, gh, gw])).all(1)).flatten()
        if gh == 0 or gw == 0:  # an empty RoI: torchvision averages no samples into 0
            yield b, idx, None, None, gh, gw
            continue
        ys, vy = _axis(y1[idx], rh[idx], ph, gh, h)
        xs, vx = _axis(x1[idx], rw[idx], pw, gw, w)
        k = len(idx)
        gy = (2 * ys / (h - 1) - 1) if h > 1 else torch.zeros_like(ys)
        gx = (2 * xs / (w - 1) - 1) if w > 1 else torch.zeros_like(xs)
        grid = torch.stack([gx.reshape(k, 1, pw * gw).expand(k, ph * gh, pw * gw),
                            gy.reshape(k, ph * gh, 1).expand(k, ph * gh, pw * gw)], dim=-1)
        mask = vy.reshape(k, ph, gh, 1, 1) & vx.reshape(k, 1, 1, pw, gw)
        yield b, idx, grid.reshape(1, k * ph * gh, pw * gw, 2), mask, gh, gw


class _ROIAlign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, features, rois, output_size, spatial_scale, sampling_ratio, aligned):
        ctx.save_for_backward(features, rois)
        ctx.args = (output_size, spatial_scale, sampling_ratio, aligned)
        return roi_align(features, rois, output_size, spatial_scale, sampling_ratio, aligned)

    @staticmethod
    def backward(ctx, grad_out):
        features, rois = ctx.saved_tensors
        output_size, spatial_scale, sampling_ratio, aligned = ctx.args
        grad = torch.zeros_like(features)
        c = features.shape[1]
        ph, pw = output_size
        for b, idx, grid, mask, gh, gw in sampling_groups(rois, features.shape[-2:], output_size, spatial_scale,
                                                          sampling_ratio, aligned, features.dtype):
            if grid is None:
                continue
            k = len(idx)
            g = grad_out[idx].permute(1, 0, 2, 3).reshape(c, k, ph, 1, pw, 1) / (gh * gw)
            g = (g * mask.to(g.dtype)).reshape(1, c, k * ph * gh, pw * gw)  # each sample's share of its bin
            grad_b, _ = torch.ops.aten.grid_sampler_2d_backward(g, features[b:b + 1], grid.to(features.dtype),
                                                                0, 1, True, [True, False])  # bilinear, border
            grad[b:b + 1] += grad_b
        return grad, None, None, None, None, None


class FastBackwardROIAlign(nn.Module):
    """Drop-in for detectron2.layers.ROIAlign (same arguments, same results) with the vectorised backward on CPU."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = True):
        super().__init__()
        self.output_size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * 2
        self.spatial_scale, self.sampling_ratio, self.aligned = spatial_scale, sampling_ratio, aligned

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        rois = rois.to(features.dtype)
        if features.is_cuda or not torch.is_grad_enabled() or not features.requires_grad:
            return roi_align(features, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)
        return _ROIAlign.apply(features, rois, self.output_size, self.spatial_scale, self.sampling_ratio,
                               self.aligned)


def use_fast_backward_roi_align(pooler: ROIPooler) -> ROIPooler:
    """Replace the pooler's ROIAlign levels (ROIAlign / ROIAlignV2) by FastBackwardROIAlign; others stay."""
    for i, level in enumerate(pooler.level_poolers):
        if isinstance(level, ROIAlign):
            pooler.level_poolers[i] = FastBackwardROIAlign(level.output_size, level.spatial_scale,
                                                           level.sampling_ratio, level.aligned)
    return pooler
