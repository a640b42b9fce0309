"""Section `main_job`: one training step of each main-job leg exactly as the job trains it (built by
detection/main_job/leg.py: its config files, model, the Trainer's optimizer and train loader on the embedded data),
BN folding on vs off, its mult-adds and their fraction of the matmul peak, and a per-operator profile."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .peak import matmul_gflops
from .stats import compare

__all__ = ["MAIN_JOB_LEGS", "iteration_gmacs", "profile_ops", "bench_main_job"]

# the legs timed: (backbone, arm of detection/main_job/arms.py); their configs are the main job's
# (plan.leg_config_files)
MAIN_JOB_LEGS = {"vgg16_bn_pretrained": ("vgg16_bn", "frozenbn_pretrained"),
                 "resnet101_pretrained": ("resnet101", "frozenbn_pretrained"),
                 "resnet101_gn_pretrained": ("resnet101", "gn_pretrained"),
                 "resnet101_scratch": ("resnet101", "gn_scratch")}


class _OnAList(nn.Module):
    """A head that takes a list of feature maps (the RPN's), called on one map: complexity() feeds one tensor."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, x):
        return self.head([x])


def iteration_gmacs(model, cfg) -> float:
    """Mult-adds of one training iteration (SOLVER.IMS_PER_BATCH square images at INPUT.MIN_SIZE_TEST): the conv/fc
    forward of trunk, RPN head and per-RoI head (res5, or VGG's fc6/fc7) on each of ROI_HEADS.BATCH_SIZE_PER_IMAGE
    RoIs, x3 for the backward pass (an estimate; NMS, RoIAlign and losses are not mult-adds). Counted by
    backbones.complexity (torch's FlopCounterMode on meta tensors) on the detector's own submodules."""
    from backbones import complexity

    s = cfg.INPUT.MIN_SIZE_TEST
    trunk = complexity(model.backbone, (3, s, s)).macs
    feat = next(iter(model.backbone.output_shape().values()))
    grid = s // feat.stride
    rpn = complexity(_OnAList(model.proposal_generator.rpn_head), (feat.channels, grid, grid)).macs
    res = cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION
    head_module = model.roi_heads.res5 if hasattr(model.roi_heads, "res5") else model.roi_heads.box_head
    head = complexity(head_module, (feat.channels, res, res)).macs
    rois = cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    return 3 * cfg.SOLVER.IMS_PER_BATCH * (trunk + rpn + rois * head) / 1e9


def profile_ops(step: Callable, top: int = 12) -> list[dict]:
    """Self CPU time by operator over 3 iterations (after one warm-up), the top `top`."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [{"op": e.key, "self_ms_per_iter": round(e.self_cpu_time_total / 3000, 2),
             "share": round(e.self_cpu_time_total / total, 3)} for e in events[:top]]


def _leg_row(name: str, arm: str, peak: float, repeats: int) -> dict:
    from backbones.blocks import set_norm_folding
    from detection.main_job.leg import build_detection_leg

    leg = build_detection_leg(name, arm=arm)
    gmacs = iteration_gmacs(leg.model, leg.cfg)

    def step(fold: bool):
        set_norm_folding(leg.model, fold)
        leg.step()

    row = compare(lambda: step(True), lambda: step(False), repeats, names=("folded", "unfolded"))
    row["gmacs_per_iteration"] = gmacs
    for side in ("folded", "unfolded"):
        row[f"fraction_of_peak_{side}"] = 2 * gmacs / row[f"s_{side}"] / peak
    row["profile_top_ops"] = profile_ops(lambda: step(True))
    return row


def bench_main_job(repeats: int) -> dict:
    from detection.datasets import ensure_embedded_dataset

    ensure_embedded_dataset()  # the legs train on it (generated once, outside the timing)
    peak = matmul_gflops(3)
    out = {"conditions": "one training step (data, forward, backward, the Trainer's optimizer) of each main-job leg "
                         "as detection/main_job/leg.py builds it: 2 embedded images at 128 px, width 0.25",
           "matmul_peak_gflops": peak}
    for leg, (name, arm) in MAIN_JOB_LEGS.items():
        out[leg] = _leg_row(name, arm, peak, repeats)
    return out
