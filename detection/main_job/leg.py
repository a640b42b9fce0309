"""One main-job leg as a harness: its config, model, optimizer, train loader and one training step -- the job's
time estimates and the benchmarks build a leg here and nowhere else; `seconds_per_step` is the one timing helper
for a step they time in place (alternating A/B rounds live in tools/benchmarks)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from backbones import create_model
from backbones.norm import calibrate_frozen_bn

from .leg_configs import leg_config_files

__all__ = ["DetectionLeg", "build_detection_leg", "PretrainStep", "build_pretrain_step", "seconds_per_step",
           "calibrate_frozen_bn"]


def seconds_per_step(step: Callable[[], object], warmup: int = 2, repeats: int = 3) -> float:
    """Mean seconds of `step` over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - t0) / repeats


@dataclass
class DetectionLeg:
    """A Faster R-CNN leg exactly as tools/train_det.py builds it (config files, build_model, the Trainer's
    optimizer and train loader); `step()` is SimpleTrainer.run_step: data, forward, backward, optimizer step."""

    cfg: object
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: object

    def __post_init__(self):
        self._batches = iter(self.loader)

    def step(self) -> float:
        from detectron2.utils.events import EventStorage

        with EventStorage(0):  # the RPN logs into it
            losses = self.model(next(self._batches))
            loss = sum(losses.values())
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return loss.detach().item()


def build_detection_leg(model: str, *, arm: str, width: float | None = None, overrides: list[str] = (),
                        seed: int = 0, configs: list[str] | None = None) -> DetectionLeg:
    """The main job's leg of `model` in `arm` (arms.ARMS; its config files from plan.leg_config_files, or
    `configs`), on the CPU; a FrozenBN leg without its checkpoint gets calibrate_frozen_bn. `overrides`: more KEY
    VALUE pairs (e.g. the loader's workers)."""
    from detectron2.modeling import build_model

    from ..config import get_detection_cfg
    from ..engine.trainer import Trainer

    opts = ["MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NAME", model,
            *(["MODEL.BACKBONES.WIDTH", str(width)] if width is not None else []), *overrides]
    cfg = get_detection_cfg(configs or leg_config_files(model, arm=arm), opts)
    torch.manual_seed(seed)
    net = build_model(cfg)
    if cfg.MODEL.BACKBONES.NORM == "FrozenBN" and not cfg.MODEL.WEIGHTS:
        calibrate_frozen_bn(net)
    net.train()
    return DetectionLeg(cfg, net, Trainer.build_optimizer(cfg, net), Trainer.build_train_loader(cfg))


@dataclass
class PretrainStep:
    """One pretraining step of the main job's recipe on a random batch (channels_last, SGD with momentum)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    images: torch.Tensor
    labels: torch.Tensor

    def step(self) -> float:
        loss = torch.nn.functional.cross_entropy(self.model(self.images), self.labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach().item()


def build_pretrain_step(model: str, *, options: dict, image_size: int, batch: int, seed: int = 0) -> PretrainStep:
    """One training step of a train_cls stage's net, built with the stage's model options (MainJobPlan.
    pretrain_options / degradation_options)."""
    torch.manual_seed(seed)
    net = create_model(model, num_classes=10, **options).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size).contiguous(memory_format=torch.channels_last)
    return PretrainStep(net, opt, x, torch.randint(0, 10, (batch,)))
