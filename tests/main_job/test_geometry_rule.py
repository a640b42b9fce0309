"""The geometry rule: every kernel tap of every backbone a preset pretrains receives gradient at the preset's
pretraining size -- a real pretraining step of the stage's net (its model options, zero-init residual included)
gives each tap a nonzero gradient -- and a plan that would leave taps untrained (32 px: res5 at 1x1) is refused
before anything runs, naming them."""

from dataclasses import replace

import pytest
import torch

from classification.analysis.degradation import RECIPE
from detection.main_job.checks import untrained_taps, validate_plan
from detection.main_job.cli import build_parser, plan_from_args
from detection.main_job.leg import build_pretrain_step
from detection.main_job.plan import MainJobPlan, PlanError
from detection.main_job.presets import PRESETS

PRETRAINING_PRESETS = [p for p in PRESETS if PRESETS[p].get("scale", "embedded") == "embedded"]


def _untrained_after_two_steps(model: str, options: dict, size: int) -> list[str]:
    """The taps (conv name, row, column) with zero gradient in the second step of the stage's recipe on a random
    batch: the first step moves the zero-initialised residual norms off zero, so every branch gets gradient."""
    step = build_pretrain_step(model, options=options, image_size=size, batch=4)
    step.step()
    step.step()
    out = []
    for name, m in step.model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            grad = m.weight.grad.abs().sum(dim=(0, 1))
            out += [f"{name}[{i},{j}]" for i, j in (grad == 0).nonzero().tolist()]
    return out


def _pretrained_nets(preset: str) -> list[tuple[str, dict, int]]:
    """(model, model options, image size) of every net the preset pretrains: its backbones and degradation nets."""
    plan = replace(MainJobPlan(), **PRESETS[preset])
    nets = [(m, plan.pretrain_options(m, n), plan.pretrain_image_size)
            for m in plan.pretrained_here() for n in plan.pretrain_norms()]
    return nets + [(m, plan.degradation_options(), RECIPE.image_size) for m in plan.degradation]


@pytest.mark.parametrize("preset", PRETRAINING_PRESETS)
def test_every_kernel_tap_of_every_net_a_preset_pretrains_gets_gradient_at_its_size(preset):
    nets = _pretrained_nets(preset)
    assert nets, preset
    for model, options, size in dict.fromkeys((m, tuple(sorted(o.items())), s) for m, o, s in nets):
        assert _untrained_after_two_steps(model, dict(options), size) == [], (preset, model, size)
    validate_plan(replace(MainJobPlan(), **PRESETS[preset]))


def test_the_rule_fails_when_a_presets_size_is_set_back_to_32_px():
    plan = replace(MainJobPlan(), **PRESETS["headline"], pretrain_image_size=32)
    untrained = _untrained_after_two_steps("resnet101", plan.pretrain_options("resnet101"), 32)
    assert len(untrained) == 24 and all(t.startswith("res5.") for t in untrained)  # 8 taps of 3 convs
    assert untrained_taps(plan, "resnet101") == (("res5", 3, 24, 393216),)
    assert untrained_taps(plan, "vgg16_bn") == ()  # conv5 runs at 2x2: every tap sees the image
    with pytest.raises(PlanError, match=r"^--pretrain-image-size 32: resnet101's kernel taps that see only padding "
                                        r"at that size would never train \(res5: 24 taps of 3 convs \(393,216 "
                                        r"weights\)\); use 48 or more, or --allow-untrained-taps"):
        validate_plan(plan)
    validate_plan(replace(plan, allow_untrained_taps=True))  # a 32-px job on purpose (the committed 32-px results)


@pytest.mark.bad_input
def test_the_command_line_refuses_32_px_and_allow_untrained_taps_where_nothing_is_untrained():
    parse = build_parser().parse_args
    with pytest.raises(PlanError, match=r"^--pretrain-image-size 32: resnet101's kernel taps"):
        plan_from_args(parse(["--preset", "headline", "--pretrain-image-size", "32"]))
    plan = plan_from_args(parse(["--preset", "headline", "--pretrain-image-size", "32", "--allow-untrained-taps"]))
    assert plan.pretrain_image_size == 32 and plan.allow_untrained_taps
    with pytest.raises(PlanError, match=r"^--allow-untrained-taps: no kernel tap of this job's pretraining sees "
                                        r"only padding \(it pretrains vgg16_bn, resnet101 at 48 px"):
        plan_from_args(parse(["--preset", "headline", "--allow-untrained-taps"]))
