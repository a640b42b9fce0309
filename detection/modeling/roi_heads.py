"""RoI heads that take their layers from `backbones`: the C4 res5 head and the VGG-16 fc6/fc7 box head."""

from __future__ import annotations

import torch
from detectron2.config import configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_HEADS_REGISTRY
from detectron2.modeling.roi_heads import Res5ROIHeads
from detectron2.modeling.roi_heads.box_head import ROI_BOX_HEAD_REGISTRY
from torch import nn
from torch.nn import functional as F

from backbones import get_norm
from backbones.norm import freeze_

from .backbone import build_backbones_model

__all__ = ["BackbonesRes5ROIHeads", "VGGFC67Head"]


@ROI_HEADS_REGISTRY.register()
class BackbonesRes5ROIHeads(Res5ROIHeads):
    """The paper's C4 head: RoI pooling on res4, then the net's *own* res5 stage, global pool, box predictor.

    Detectron2's Res5ROIHeads always builds bottleneck blocks; this one takes `res5` from the `backbones` model
    named in MODEL.BACKBONES (basic blocks for R18/R34, no shortcuts for plain nets, pre-activation units and
    their final BN-ReLU when PREACT). Parameter names stay `roi_heads.res5.<block>...` as in Detectron2.
    """

    @configurable
    def __init__(self, *, final_norm: nn.Module | None = None, **kwargs):
        super().__init__(**kwargs)
        self.final_norm = final_norm

    @classmethod
    def from_config(cls, cfg, input_shape):
        ret = super().from_config(cfg, input_shape)
        if cfg.MODEL.BACKBONES.PREACT:  # pre-activation nets end with BN-ReLU on res5's output
            norm = get_norm(cfg.MODEL.BACKBONES.NORM, ret["res5"].out_channels)
            ret["final_norm"] = freeze_(norm) if cfg.MODEL.BACKBONES.FREEZE_AT > 5 else norm
        return ret

    @classmethod
    def _build_res5_block(cls, cfg):
        model = build_backbones_model(cfg)
        if "res5" not in model.stage_names:
            raise ValueError(f"MODEL.BACKBONES.NAME={cfg.MODEL.BACKBONES.NAME!r} has no res5 stage for a C4 head")
        return model.res5, model.feature("res5").channels

    def _shared_roi_transform(self, features, boxes):
        x = self.res5(self.pooler(features, boxes))
        return F.relu(self.final_norm(x)) if self.final_norm is not None else x


@ROI_BOX_HEAD_REGISTRY.register()
class VGGFC67Head(nn.Module):
    """py-faster-rcnn's VGG-16 box head: fc6 (4096) - ReLU - dropout - fc7 (4096) - ReLU - dropout.

    Named `fc6` / `fc7` like the classifier of `backbones`' VGG, so MODEL.WEIGHTS initialises them from the
    ImageNet classifier (7x7 RoI pooling on conv5_3 gives fc6 its 512*7*7 inputs, as on ImageNet).
    """

    @configurable
    def __init__(self, input_shape: ShapeSpec, *, fc_dim: int = 4096, dropout: float = 0.5):
        super().__init__()
        in_dim = input_shape.channels * (input_shape.height or 1) * (input_shape.width or 1)
        self.fc6 = nn.Linear(in_dim, fc_dim)
        self.fc7 = nn.Linear(fc_dim, fc_dim)
        self.dropout = nn.Dropout(dropout)
        for fc in (self.fc6, self.fc7):  # VGG's own init, used when no weights are given
            nn.init.normal_(fc.weight, 0, 0.01)
            nn.init.zeros_(fc.bias)
        self._output_size = fc_dim

    @classmethod
    def from_config(cls, cfg, input_shape):
        return {"input_shape": input_shape, "dropout": cfg.MODEL.BACKBONES.FC_DROPOUT}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu_(self.fc6(x)))
        return self.dropout(F.relu_(self.fc7(x)))

    @property
    def output_shape(self) -> ShapeSpec:
        return ShapeSpec(channels=self._output_size)
