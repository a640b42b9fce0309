"""Section `peak`: a large matmul's GFLOP/s (the machine's practical peak) and the backbones' inference GFLOP/s as
a share of it."""

from __future__ import annotations

import torch

from detection.main_job.leg import seconds_per_step

__all__ = ["matmul_gflops", "backbone_gflops", "bench_peak"]


def matmul_gflops(repeats: int) -> float:
    """GFLOP/s of a 4096 x 4096 fp32 matmul."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    return 2 * 4096**3 / seconds_per_step(lambda: a @ b, warmup=1, repeats=repeats) / 1e9


def backbone_gflops(name: str, repeats: int) -> float:
    """Inference GFLOP/s of `name` on a batch of 8 at 224 (mult-adds from backbones.complexity)."""
    import backbones

    model = backbones.create_model(name).eval()
    macs = backbones.complexity(model).macs
    x = torch.randn(8, 3, 224, 224)
    with torch.inference_mode():
        seconds = seconds_per_step(lambda: model(x), warmup=1, repeats=repeats)
    return 2 * macs * 8 / seconds / 1e9


def bench_peak(repeats: int) -> dict:
    res = {"matmul_gflops": matmul_gflops(repeats)}
    for name in ("resnet101", "resnet50"):
        res[f"{name}_inference_gflops"] = g = backbone_gflops(name, repeats)
        res[f"{name}_fraction_of_peak"] = g / res["matmul_gflops"]
    return res
