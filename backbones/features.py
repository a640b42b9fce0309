"""The feature API shared by every model: stage outputs by name, with channels and stride declared up front."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["FeatureInfo", "FeatureNet", "run_stages"]


# timm's feature_info keys -> ours: a timm consumer reads `model.feature_info[i]["num_chs"]`
TIMM_FEATURE_KEYS = {"num_chs": "channels", "reduction": "stride", "module": "name"}


@dataclass(frozen=True)
class FeatureInfo(Mapping):
    """One stage output: its name (stride in the name: res4 = stride 16), channels and stride w.r.t. the input.

    Also read as timm's feature_info dict (`info["num_chs"]`, `info["reduction"]`, `info["module"]`, `dict(info)`),
    so a timm consumer of the full model needs no adapter."""

    name: str
    channels: int
    stride: int

    def __getitem__(self, key: str):
        return getattr(self, TIMM_FEATURE_KEYS[key])

    def __iter__(self) -> Iterator[str]:
        return iter(TIMM_FEATURE_KEYS)

    def __len__(self) -> int:
        return len(TIMM_FEATURE_KEYS)


def run_stages(stages: Iterable[tuple[str, nn.Module]], x: torch.Tensor, wanted: Iterable[str]
               ) -> Iterator[tuple[str, torch.Tensor]]:
    """Feed `x` through (name, module) stages in order, yielding (name, output) for the `wanted` ones and stopping
    after the last of them. The one stage loop of every backbone, the Detectron2 trunk and the benchmarks."""
    wanted = set(wanted)
    for name, module in stages:
        if not wanted:
            return
        x = module(x)
        if name in wanted:
            wanted.discard(name)
            yield name, x


class FeatureNet(nn.Module):
    """Base class of all backbones: `stage_names` run in order; `feature_info` is declared while building.

    Subclasses add stages with `add_stage(name, module, channels, stride)` and implement `forward_head`.
    """

    def __init__(self):
        super().__init__()
        self.feature_info: list[FeatureInfo] = []
        self.arch: dict = {}  # the options that define the architecture and its weight conventions

    @property
    def stage_names(self) -> list[str]:
        return [f.name for f in self.feature_info]

    def add_stage(self, name: str, module: nn.Module, channels: int, stride: int) -> None:
        self.add_module(name, module)
        self.feature_info.append(FeatureInfo(name, channels, stride))

    def feature(self, name: str) -> FeatureInfo:
        for f in self.feature_info:
            if f.name == name:
                return f
        raise KeyError(f"{type(self).__name__} has no stage {name!r}; stages: {self.stage_names}")

    def forward_features(self, x: torch.Tensor, out_features: Iterable[str] | None = None
                         ) -> OrderedDict[str, torch.Tensor]:
        """Run the stages in order; return the outputs named in `out_features` (default: all stages).

        Computation stops after the last requested stage.
        """
        wanted = list(self.stage_names if out_features is None else out_features)
        for name in wanted:
            self.feature(name)  # raises a clear KeyError for an unknown name
        return OrderedDict(run_stages(((n, getattr(self, n)) for n in self.stage_names), x, wanted))

    def forward_head(self, features: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def new_classifier(in_features: int, num_classes: int) -> nn.Linear | None:
        """A fresh classifier as every family's builder initialises one (N(0, 0.01), zero bias); None for 0 classes
        (timm's reset_classifier, backbones.timm_interface)."""
        if num_classes <= 0:
            return None
        fc = nn.Linear(in_features, num_classes)
        nn.init.normal_(fc.weight, std=0.01)
        nn.init.zeros_(fc.bias)
        return fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = self.stage_names[-1]
        return self.forward_head(self.forward_features(x, [last])[last])

    def freeze(self, freeze_at: int) -> FeatureNet:
        """Freeze the first `freeze_at` stages (Detectron2's FREEZE_AT: 1 = stem, 2 = stem + res2, ...)."""
        if not 0 <= freeze_at <= len(self.stage_names):
            raise ValueError(f"freeze_at={freeze_at} out of range 0..{len(self.stage_names)} "
                             f"for stages {self.stage_names}")
        for name in self.stage_names[:freeze_at]:
            getattr(self, name).freeze()
        return self
