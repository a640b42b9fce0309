"""detection.engine.optimizer: Detectron2's optimizer with foreach clipping and the fused SGD kernel."""

import pytest
import torch


def test_foreach_clipping_equals_detectron2s_per_parameter_clipping():
    from detectron2.config import get_cfg
    from detectron2.solver.build import _create_gradient_clipper

    from detection.engine.optimizer import clip_each_parameter_norm_

    cfg = get_cfg().SOLVER.CLIP_GRADIENTS
    cfg.CLIP_VALUE, cfg.CLIP_TYPE = 10.0, "norm"
    clip = _create_gradient_clipper(cfg)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in ((8, 3, 3, 3), (8,), (16, 8), (5,), (7,))]
    for p, scale in zip(params, (0.01, 100.0, 3.0, 50.0, 0.0)):
        p.grad = torch.randn(p.shape) * scale
    grads = [p.grad.clone() for p in params]
    for p in params:
        clip(p)
    clip_each_parameter_norm_(grads, 10.0)
    for p, g in zip(params, grads):
        assert torch.equal(p.grad, g)
    assert float(params[1].grad.norm()) == pytest.approx(10.0, rel=1e-5)  # clipped to the bound


def test_the_detection_optimizer_follows_detectron2s_over_steps_with_fused_sgd():
    """Same parameter groups, clipping and SGD arithmetic as Detectron2's build_optimizer; the fused kernel rounds
    its multiply-adds differently (a few float32 ulps), nothing more."""
    from detectron2.config import get_cfg
    from detectron2.solver import build_optimizer as d2_build_optimizer

    from detection.engine.optimizer import build_optimizer

    cfg = get_cfg()
    cfg.SOLVER.CLIP_GRADIENTS.ENABLED, cfg.SOLVER.CLIP_GRADIENTS.CLIP_TYPE = True, "norm"
    cfg.SOLVER.CLIP_GRADIENTS.CLIP_VALUE, cfg.SOLVER.WEIGHT_DECAY_BIAS = 10.0, 0.0

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
                                   torch.nn.Linear(8 * 6 * 6, 5))

    ref, ours = net(), net()
    opt_ref, opt = d2_build_optimizer(cfg, ref), build_optimizer(cfg, ours)
    assert opt.defaults["fused"] and len(opt.param_groups) == len(opt_ref.param_groups)
    x = torch.randn(4, 3, 8, 8)
    for step in range(6):  # odd steps: gradients far over the bound, so clipping acts
        for model, o in ((ref, opt_ref), (ours, opt)):
            o.zero_grad()
            model(x * (1 + 20 * (step % 2))).square().sum().backward()
            o.step()
    for p_ref, p in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-6, atol=1e-7)
    start = net()
    assert not torch.equal(ref[0].weight, start[0].weight) and not torch.equal(ref[3].weight, start[3].weight)
