"""FastBackwardROIAlign: torchvision's roi_align values and gradients, on the matrix path and the grid_sample path."""

import pytest
import torch
from torchvision.ops import roi_align

from detection.modeling.roi_align import FastBackwardROIAlign


@pytest.mark.parametrize("shape,out,scale,sampling,aligned", [
    ((2, 16, 8, 8), (7, 7), 1 / 16, 0, True),     # the main job's C4 / VGG pooling (ROIAlignV2, adaptive)
    ((2, 16, 8, 8), (7, 7), 1 / 16, 0, False),    # legacy ROIAlign
    ((1, 8, 20, 30), (14, 14), 1 / 16, 2, True),  # fixed sampling ratio
    ((1, 8, 5, 1), (3, 2), 1 / 4, 0, True),       # a one-pixel-wide map
])
@pytest.mark.parametrize("path", ["matrix", "grid_sample"])
def test_values_and_gradients_equal_torchvision(shape, out, scale, sampling, aligned, path, monkeypatch):
    # each path on every case, whatever the size limit picks
    monkeypatch.setattr(FastBackwardROIAlign, "matrix_path_max_elements", 0 if path == "grid_sample" else 1 << 40)
    torch.manual_seed(0)
    n, c, h, w = shape
    f = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    r = 24
    xy = torch.rand(r, 2, dtype=torch.float64) * torch.tensor([w, h]) / scale * 1.2 - 0.1 * w / scale
    wh = torch.rand(r, 2, dtype=torch.float64) * torch.tensor([w, h]) / scale * 0.8
    rois = torch.cat([torch.randint(0, n, (r, 1)).double(), xy, xy + wh], 1)
    rois[0, 1:] = torch.tensor([-30.0, -30.0, -1.0, -1.0])  # entirely outside the map
    rois[1, 3] = rois[1, 1]  # zero width
    ref = roi_align(f, rois, out, scale, sampling, aligned)
    ours = FastBackwardROIAlign(out, scale, sampling, aligned)(f, rois)
    weights = torch.randn_like(ref)
    (g_ref,) = torch.autograd.grad((ref * weights).sum(), f)
    (g_ours,) = torch.autograd.grad((ours * weights).sum(), f)
    if path == "grid_sample":
        assert torch.equal(ours, ref)  # torchvision's own forward
    else:
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-14)  # the same sums, GEMM-ordered
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-10, atol=1e-12)


def test_no_rois_give_an_empty_output_and_a_zero_gradient():
    f = torch.randn(2, 4, 8, 8, requires_grad=True)
    out = FastBackwardROIAlign((7, 7), 1 / 16, 0, True)(f, torch.zeros(0, 5))
    assert out.shape == (0, 4, 7, 7)
    (grad,) = torch.autograd.grad(out.sum(), f, allow_unused=True)
    assert grad is None or not grad.any()


def test_the_main_jobs_pooling_takes_the_matrix_path_and_large_maps_the_grid_sample_one():
    pool = FastBackwardROIAlign((7, 7), 1 / 16, 0, True)
    rois = torch.tensor([[0.0, 8.0, 8.0, 90.0, 100.0], [1.0, 30.0, 20.0, 120.0, 110.0]])
    small = pool(torch.randn(2, 4, 8, 8, requires_grad=True), rois)  # 128-px images, stride 16
    large = pool(torch.randn(2, 4, 38, 50, requires_grad=True), rois.repeat(200, 1))  # 600 px, 400 RoIs
    assert "Matrix" in small.grad_fn.name() and "Matrix" not in large.grad_fn.name()
