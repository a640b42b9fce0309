"""The detection optimizer: Detectron2 0.6's `build_optimizer` (same parameter groups, SGD, per-parameter gradient
clipping) with the per-parameter loops done as foreach ops and SGD's fused kernel.

Why: Detectron2 clips each parameter's gradient with its own `clip_grad_norm_` call and SGD runs its single-tensor
loop on CPU; at the main job's scale (~100 small tensors, 2 images of 128 px) those Python loops took ~15 ms of a
~115 ms iteration (tools/benchmark.py, main_job section), and foreach SGD still made four passes over every
parameter (weight decay, momentum, update): 11 ms of a 65 ms VGG-16(BN) iteration (8.5 M parameters, most in
fc6). The fused kernel makes one. The arithmetic is Detectron2's: each gradient g becomes
g * min(1, CLIP_VALUE / (||g|| + 1e-6)), and SGD's update is unchanged (foreach / fused are implementation choices;
tests: the clipping equals Detectron2's bit for bit, the parameters after several steps within a few float32 ulps --
the fused kernel rounds its multiply-adds differently).
"""

from __future__ import annotations

import torch
from detectron2.solver.build import get_default_optimizer_params, maybe_add_gradient_clipping

__all__ = ["build_optimizer", "SGDClippingEachParameter", "clip_each_parameter_norm_"]


@torch.no_grad()
def clip_each_parameter_norm_(grads: list[torch.Tensor], max_norm: float, norm_type: float = 2.0) -> None:
    """In place, per tensor: g *= min(1, max_norm / (||g||_norm_type + 1e-6)) -- `clip_grad_norm_(g, ...)` for each
    g, as Detectron2's per-parameter clipper, in one foreach norm and one foreach multiply of those over the bound."""
    if not grads:
        return
    norms = torch.stack(torch._foreach_norm(grads, norm_type))
    coefs = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
    # A coefficient of exactly 1 leaves its gradient as it is (g * 1.0 == g in IEEE arithmetic, NaN and inf
    # included), and after the first iterations nearly every gradient is under the bound: multiply only the others.
    clipped = [i for i, c in enumerate(coefs.tolist()) if c != 1.0]
    if clipped:
        torch._foreach_mul_([grads[i] for i in clipped], [coefs[i] for i in clipped])


class SGDClippingEachParameter(torch.optim.SGD):
    """SGD whose step first clips every parameter's gradient norm to `clip_value` separately (Detectron2's
    CLIP_TYPE "norm")."""

    def __init__(self, params, *, clip_value: float, norm_type: float = 2.0, **kwargs):
        super().__init__(params, **kwargs)
        self.clip_value, self.norm_type = float(clip_value), float(norm_type)

    def step(self, closure=None):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        clip_each_parameter_norm_(grads, self.clip_value, self.norm_type)
        return super().step(closure)


def _sgd_implementation(param_groups: list[dict]) -> dict:
    """SGD's fused kernel where torch has one for every parameter (floating point on CPU or CUDA), else foreach."""
    params = [p for g in param_groups for p in g["params"]]
    if params and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params):
        return {"fused": True}
    return {"foreach": True}


def build_optimizer(cfg, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Detectron2's optimizer for `cfg` (SOLVER.*): foreach clipping, fused SGD (foreach where torch has no fused
    kernel for the parameters' device)."""
    params = get_default_optimizer_params(model, base_lr=cfg.SOLVER.BASE_LR,
                                          weight_decay_norm=cfg.SOLVER.WEIGHT_DECAY_NORM,
                                          bias_lr_factor=cfg.SOLVER.BIAS_LR_FACTOR,
                                          weight_decay_bias=cfg.SOLVER.WEIGHT_DECAY_BIAS)
    kwargs = {"lr": cfg.SOLVER.BASE_LR, "momentum": cfg.SOLVER.MOMENTUM, "nesterov": cfg.SOLVER.NESTEROV,
              "weight_decay": cfg.SOLVER.WEIGHT_DECAY, **_sgd_implementation(params)}
    clip = cfg.SOLVER.CLIP_GRADIENTS
    if clip.ENABLED and clip.CLIP_TYPE == "norm":
        return SGDClippingEachParameter(params, clip_value=clip.CLIP_VALUE, norm_type=clip.NORM_TYPE, **kwargs)
    return maybe_add_gradient_clipping(cfg, torch.optim.SGD)(params, **kwargs)  # "value" clipping or none
