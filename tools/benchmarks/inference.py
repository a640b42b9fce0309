"""Section `inference`: the fast inference path (backbones.optimize_for_inference and
detection.modeling.inference.optimize_detector_for_inference) against eager, and against the references given the
*same* treatment (the same function applied to torchvision's / Detectron2's model: Inductor's freezing folds their BN
itself). Backbones: R-50 / R-101, batch 8 at 224, GFLOP/s and their share of a 4096^2 matmul timed as one more side
of the same rounds. Detector: R-101-C4 at 600x800, ours fast vs Detectron2's built-in as users run it (eager) and vs
Detectron2 given the same fast path. Every side's outputs are checked against the eager model before it is timed.
Compile times are cold: Inductor's caches are off for this section (force_disable_caches)."""

from __future__ import annotations

import gc
import statistics

import torch

from . import checkout
from .stats import alternate, ratio_stats

__all__ = ["bench_inference"]


def _sides(fns: dict, repeats: int, pairs: dict[str, tuple[str, str]]) -> dict:
    """Time the sides alternating; median seconds of each and the named ratios (first / second faster by)."""
    times = alternate(fns, repeats)
    out = {f"s_{k}": statistics.median(v) for k, v in times.items()}
    for row, (ours, ref) in pairs.items():
        out[row] = ratio_stats(times[ref], times[ours])
    return out


def _bench_backbone(name: str, repeats: int) -> dict:
    import torchvision

    import backbones
    from backbones.inference import optimize_for_inference

    torch.manual_seed(0)
    ours = backbones.create_model(name, stride_in_1x1=False)
    tv = getattr(torchvision.models, name)(weights=None)
    path = checkout().root / "output" / "benchmark" / f"{name}_tv.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tv.state_dict(), path)
    backbones.load_pretrained(ours, path)
    ours.eval()
    tv.eval()
    x = torch.randn(8, 3, 224, 224)
    fast, tv_fast = optimize_for_inference(ours), optimize_for_inference(tv)
    with torch.no_grad():
        ref = tv(x)
        tol = 1e-3 * float(ref.abs().max())  # relative to the output's scale, as the backbone section
        for side in (ours, fast, tv_fast):
            torch.testing.assert_close(side(x), ref, atol=tol, rtol=1e-3)
        a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
        # the matmul is a side of the same rounds: this VM's speed drifts between minutes, and the share of peak
        # must not compare a backbone timed in a slow minute with a peak timed in a fast one
        row = _sides({"ours_eager": lambda: ours(x), "ours_fast": lambda: fast(x), "tv_eager": lambda: tv(x),
                      "tv_fast": lambda: tv_fast(x), "matmul": lambda: a @ b}, repeats,
                     {"ours_fast_vs_torchvision_fast": ("ours_fast", "tv_fast"),  # like for like first
                      "fast_vs_eager_ours": ("ours_fast", "ours_eager"),
                      "ours_fast_vs_torchvision_eager": ("ours_fast", "tv_eager")})
    flop = 2 * backbones.complexity(ours).macs * 8
    row["matmul_gflops"] = peak = 2 * 4096**3 / row["s_matmul"] / 1e9
    for side in ("ours_eager", "ours_fast", "tv_eager", "tv_fast"):
        row[f"gflops_{side}"] = flop / row[f"s_{side}"] / 1e9
        row[f"fraction_of_peak_{side}"] = row[f"gflops_{side}"] / peak
    row["compile_s_ours"], row["compile_s_tv"] = fast.compile_seconds, tv_fast.compile_seconds
    return row


def _bench_detector(repeats: int) -> dict:
    from detection.modeling.inference import compile_seconds, optimize_detector_for_inference

    from .detector import build_detector_pair, detector_cfgs, detector_inputs

    ours, d2 = build_detector_pair(*detector_cfgs())
    for m in (ours, d2):
        m.eval()
        m.roi_heads.box_predictor.test_score_thresh = 0.0  # 100 detections to compare, not 0 from random heads
    fast, d2_fast = optimize_detector_for_inference(ours), optimize_detector_for_inference(d2)
    batch = [{k: v for k, v in detector_inputs()[0].items() if k != "instances"}]
    with torch.no_grad():
        # the same weights and image: the same trunk features and scores. A random box predictor scores every
        # class near 1/81, so near-ties reorder between sides: the scores are compared sorted, not box by box
        image = d2.preprocess_image(batch).tensor
        ref_features, ref_scores = d2.backbone(image)["res4"], d2(batch)[0]["instances"].scores.sort().values
        for side in (ours, fast, d2_fast):
            features = side.backbone(image)["res4"]
            torch.testing.assert_close(features, ref_features, atol=1e-3 * float(ref_features.abs().max()),
                                       rtol=1e-3)
            torch.testing.assert_close(side(batch)[0]["instances"].scores.sort().values, ref_scores, atol=1e-4,
                                       rtol=1e-3)
        row = _sides({"ours_eager": lambda: ours(batch), "ours_fast": lambda: fast(batch),
                      "d2_eager": lambda: d2(batch), "d2_fast": lambda: d2_fast(batch)}, repeats,
                     {"ours_fast_vs_detectron2_fast": ("ours_fast", "d2_fast"),  # like for like first
                      "ours_fast_vs_detectron2_eager": ("ours_fast", "d2_eager"),
                      "fast_vs_eager_ours": ("ours_fast", "ours_eager"),
                      "ours_eager_vs_detectron2_eager": ("ours_eager", "d2_eager")})
    row["compile_s_ours"], row["compile_s_d2"] = compile_seconds(fast), compile_seconds(d2_fast)
    return row


def bench_inference(repeats: int) -> dict:
    from torch._inductor import config as inductor_config

    out = {"conditions": "fp32; backbones batch 8 at 224, eval; detector R-101-C4, 1 image 600x800, ROIPool, "
                         "FrozenBN; fast = optimize_for_inference (fold, channels_last, torch.compile freezing); "
                         "eager = model(x) as a user calls it (NCHW input; ours folds BN, the folded weights cached "
                         "under no_grad)"}
    with inductor_config.patch(force_disable_caches=True):  # compile times as a fresh machine pays them
        for name in ("resnet50", "resnet101"):
            out[name] = _bench_backbone(name, repeats)
            gc.collect()
        out["detector_r101_c4"] = _bench_detector(repeats)
    return out
