"""RoIAlign for training on CPU: torchvision's results, from matrix products on small maps and from ATen's
vectorised `grid_sample` backward on large ones.

torchvision's CPU roi_align backward recomputes the bilinear weights and adds each sample's gradient one scalar at
a time; at the main job's scale it was the largest cost after the convolutions (tools/benchmark.py main_job).
- Small maps (the main job's 8x8 res4 / conv5 at 128 px): a bin's bilinear weights are the outer product of a
  weight vector along y and one along x, so RoIAlign is one sampling matrix K (RoI bins x map positions): forward
  K @ features and backward K^T @ grad, each one GEMM on channels_last data (forward + backward of 32 RoIs on
  2 x 256 x 8 x 8 at 2 threads: 3.1 ms against 6.7-8.1 ms in two runs; the forward's sums are GEMM-ordered,
  equal to torchvision's up to float rounding).
- Large maps (K over `FastBackwardROIAlign.matrix_path_max_elements`): torchvision's forward; the same samples,
  written as a bilinear `grid_sample` grid per (image, sampling grid), give the input gradient from ATen's
  vectorised kernel.
Semantics are torchvision's kernel exactly: RoI corners scaled (and shifted by -0.5 when `aligned`),
`sampling_ratio` points per bin side (0: ceil of the bin size), samples beyond one pixel outside the map contribute
0, samples within it are clamped to the border, bins average their samples (tests compare both paths with
torchvision in float64). Inference and CUDA use torchvision's op.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from detectron2.layers import ROIAlign
from detectron2.modeling.poolers import ROIPooler
from torch import nn
from torchvision.ops import roi_align

__all__ = ["FastBackwardROIAlign", "use_fast_backward_roi_align", "sampling_groups", "sampling_matrix"]


def _axis(start: torch.Tensor, size: torch.Tensor, bins: int, grid: int, limit: int):
    """Sample coordinates (k, bins, grid) along one axis, clamped to [0, limit - 1], and whether each is used."""
    steps = (torch.arange(bins, device=start.device, dtype=start.dtype)[:, None]
             + (torch.arange(grid, device=start.device, dtype=start.dtype)[None, :] + 0.5) / grid)
    pos = start[:, None, None] + size[:, None, None] / bins * steps[None]
    valid = (pos >= -1.0) & (pos <= limit)
    return pos.clamp(0, limit - 1), valid


def _roi_geometry(rois: torch.Tensor, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool):
    """torchvision's RoI geometry on the map: x1, y1, width, height (shifted by -0.5 when `aligned`, at least 1x1
    when not) and the samples per bin side gh, gw (`sampling_ratio`, or 0: ceil of the bin size), per RoI."""
    ph, pw = output_size
    offset = 0.5 if aligned else 0.0
    x1, y1 = rois[:, 1] * spatial_scale - offset, rois[:, 2] * spatial_scale - offset
    rw, rh = rois[:, 3] * spatial_scale - offset - x1, rois[:, 4] * spatial_scale - offset - y1
    if not aligned:  # the legacy kernel forces RoIs to be at least 1x1
        rw, rh = rw.clamp(min=1.0), rh.clamp(min=1.0)
    if sampling_ratio > 0:
        gh = gw = torch.full((len(rois),), sampling_ratio, dtype=torch.long, device=rois.device)
    else:
        gh, gw = torch.ceil(rh / ph).long(), torch.ceil(rw / pw).long()
    return x1, y1, rw, rh, gh, gw


def sampling_groups(rois: torch.Tensor, feature_hw: tuple[int, int], output_size: tuple[int, int],
                    spatial_scale: float, sampling_ratio: int, aligned: bool, dtype: torch.dtype
                    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None, torch.Tensor | None, int, int]]:
    """RoIs grouped by (image, samples per bin side): (image, RoI indices, grid (1, k*ph*gh, pw*gw, 2) for
    grid_sample with align_corners=True, mask (k, ph, gh, pw, gw), gh, gw). Empty RoIs come with grid None."""
    h, w = feature_hw
    ph, pw = output_size
    rois = rois.to(dtype)
    x1, y1, rw, rh, gh_all, gw_all = _roi_geometry(rois, output_size, spatial_scale, sampling_ratio, aligned)
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


def _bilinear_weights(start: torch.Tensor, size: torch.Tensor, bins: int, grid: torch.Tensor, limit: int
                      ) -> torch.Tensor:
    """(R, bins, limit): along one axis, the bilinear weight each bin's samples give each map position, summed
    over the bin's `grid[r]` samples -- torchvision's bilinear_interpolate: a sample beyond [-1, limit] gives
    nothing, others are clamped to [0, limit - 1]."""
    dtype = start.dtype
    g = torch.arange(max(int(grid.max()), 1), device=start.device, dtype=dtype)
    b = torch.arange(bins, device=start.device, dtype=dtype)
    bin_size = (size / bins)[:, None, None]
    grid_f = grid.to(dtype)[:, None, None]
    pos = (start[:, None, None] + b[None, :, None] * bin_size
           + (g + 0.5) * bin_size / grid_f.clamp(min=1.0))  # (R, bins, G); an empty RoI (grid 0) has no samples
    used = ((g < grid_f) & (pos >= -1.0) & (pos <= limit)).to(dtype)
    pos = pos.clamp(min=0.0)
    low = pos.floor().long()
    at_end = low >= limit - 1
    low = low.clamp(max=limit - 1)
    high = torch.where(at_end, low, low + 1)
    frac = torch.where(at_end, torch.zeros_like(pos), pos - low.to(dtype))
    positions = torch.arange(limit, device=start.device)
    weights = ((used * (1 - frac))[..., None] * (low[..., None] == positions)
               + (used * frac)[..., None] * (high[..., None] == positions))
    return weights.sum(2)


def sampling_matrix(rois: torch.Tensor, features_shape, output_size, spatial_scale: float, sampling_ratio: int,
                    aligned: bool, dtype: torch.dtype) -> torch.Tensor:
    """K (R ph pw, N H W) with roi_align(features)[r, c, i, j] = sum over (b, y, x) of K[(r, i, j), (b, y, x)]
    features[b, c, y, x]: a bin's bilinear weights are the outer product of one weight vector along y and one
    along x (`_bilinear_weights`), averaged over its samples, and zero outside its RoI's image."""
    n, _, h, w = features_shape
    ph, pw = output_size
    rois = rois.to(dtype)
    x1, y1, rw, rh, gh, gw = _roi_geometry(rois, output_size, spatial_scale, sampling_ratio, aligned)
    wy = _bilinear_weights(y1, rh, ph, gh, h) / (gh * gw).clamp(min=1).to(dtype)[:, None, None]  # (R, ph, H)
    wx = _bilinear_weights(x1, rw, pw, gw, w)  # (R, pw, W)
    image = torch.nn.functional.one_hot(rois[:, 0].long(), n).to(dtype)  # (R, N)
    k = (wy[:, :, None, None, :, None] * wx[:, None, :, None, None, :]) * image[:, None, None, :, None, None]
    return k.reshape(len(rois) * ph * pw, n * h * w)


class _MatrixROIAlign(torch.autograd.Function):
    """Small maps: forward and backward are one matrix product each with the sampling matrix (2 threads' GEMM
    instead of torchvision's per-sample loops); channels_last in, channels_last out."""

    @staticmethod
    def forward(ctx, features, rois, output_size, spatial_scale, sampling_ratio, aligned):
        n, c, h, w = features.shape
        k = sampling_matrix(rois, features.shape, output_size, spatial_scale, sampling_ratio, aligned,
                            features.dtype)
        ctx.save_for_backward(k)
        ctx.shape = (n, c, h, w)
        out = k @ features.permute(0, 2, 3, 1).reshape(n * h * w, c)  # free when features are channels_last
        return out.reshape(len(rois), *output_size, c).permute(0, 3, 1, 2)

    @staticmethod
    def backward(ctx, grad_out):
        (k,) = ctx.saved_tensors
        n, c, h, w = ctx.shape
        grad = k.t() @ grad_out.permute(0, 2, 3, 1).reshape(k.shape[0], c)  # (N H W, C)
        return grad.reshape(n, h, w, c).permute(0, 3, 1, 2), None, None, None, None, None


class _ROIAlign(torch.autograd.Function):
    """Large maps: torchvision's forward; the backward as grid_sample backward calls per (image, sampling grid)."""

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
    """Drop-in for detectron2.layers.ROIAlign (same arguments, same results) with faster training paths on CPU."""

    # The largest sampling matrix (R ph pw x N H W) the matrix path builds; above it torchvision's forward and the
    # grid_sample backward run. Measured forward + backward, 256 channels, 2 threads: 0.2 M entries (the main job:
    # 32 RoIs, two 8x8 maps) 3.1 vs 8.1 ms, 0.45 M 3.5 vs 6.3, 0.8 M 8.2 vs 8.5 (parity), 3.2 M 38.7 vs 32.2.
    matrix_path_max_elements = 1 << 19

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = True):
        super().__init__()
        self.output_size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * 2
        self.spatial_scale, self.sampling_ratio, self.aligned = spatial_scale, sampling_ratio, aligned

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        rois = rois.to(features.dtype)
        if features.is_cuda or not torch.is_grad_enabled() or not features.requires_grad:
            return roi_align(features, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)
        n, _, h, w = features.shape
        small = 0 < len(rois) * self.output_size[0] * self.output_size[1] * n * h * w <= self.matrix_path_max_elements
        return (_MatrixROIAlign if small else _ROIAlign).apply(features, rois, self.output_size, self.spatial_scale,
                                                               self.sampling_ratio, self.aligned)


def use_fast_backward_roi_align(pooler: ROIPooler) -> ROIPooler:
    """Replace the pooler's ROIAlign levels (ROIAlign / ROIAlignV2) by FastBackwardROIAlign; others stay."""
    for i, level in enumerate(pooler.level_poolers):
        if isinstance(level, ROIAlign):
            pooler.level_poolers[i] = FastBackwardROIAlign(level.output_size, level.spatial_scale,
                                                           level.sampling_ratio, level.aligned)
    return pooler
