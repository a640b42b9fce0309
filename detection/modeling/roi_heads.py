"""RoI heads whose per-RoI layers are the `backbones` model's own: the C4 res5 head and the VGG-16 fc6/fc7 head.

Each takes the layers from the model `BackbonesRCNN` built (`backbones_model=`), so the trunk and the head are
one network, built once; used in another meta-architecture, a head builds its own copy of the model.
"""

from __future__ import annotations

import torch
from detectron2.config import configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_HEADS_REGISTRY
from detectron2.modeling.poolers import ROIPooler
from detectron2.modeling.roi_heads import Res5ROIHeads, ROIHeads, StandardROIHeads
from detectron2.modeling.roi_heads.box_head import ROI_BOX_HEAD_REGISTRY
from detectron2.modeling.roi_heads.fast_rcnn import FastRCNNOutputLayers
from torch import nn

from backbones import FeatureNet
from backbones.resnet import final_activation
from backbones.vgg import fc67

from .backbone import build_backbones_model
from .roi_align import use_fast_backward_roi_align

__all__ = ["BackbonesRes5ROIHeads", "BackbonesVGGROIHeads", "VGGFC67Head"]


def _pooler(cfg, input_shape, in_features) -> ROIPooler:
    """Detectron2's ROIPooler; its RoIAlign levels get the vectorised CPU backward (same values, roi_align.py)."""
    return use_fast_backward_roi_align(ROIPooler(
        output_size=cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION,
        scales=tuple(1.0 / input_shape[f].stride for f in in_features),
        sampling_ratio=cfg.MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO, pooler_type=cfg.MODEL.ROI_BOX_HEAD.POOLER_TYPE))


@ROI_HEADS_REGISTRY.register()
class BackbonesRes5ROIHeads(Res5ROIHeads):
    """The paper's C4 head: RoI pooling on res4, then the net's *own* res5 stage, global pool, box predictor.

    Detectron2's Res5ROIHeads always builds bottleneck blocks; this one is the `backbones` model's res5 (basic
    blocks for R18/R34, no shortcuts for plain nets, pre-activation units and their final BN-ReLU when PREACT).
    Parameter names stay `roi_heads.res5.<block>...` as in Detectron2.
    """

    @configurable
    def __init__(self, *, final_norm: nn.Module | None = None, channels_last: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.final_norm = final_norm
        self.channels_last = channels_last  # RoIAlign/RoIPool give NCHW: convert once per batch of RoIs

    @classmethod
    def from_config(cls, cfg, input_shape, backbones_model: FeatureNet | None = None):
        if cfg.MODEL.MASK_ON or cfg.MODEL.KEYPOINT_ON:
            raise ValueError("BackbonesRes5ROIHeads is a box head: MODEL.MASK_ON / KEYPOINT_ON are not supported")
        model = backbones_model if backbones_model is not None else build_backbones_model(cfg)
        if "res5" not in model.stage_names:
            raise ValueError(f"MODEL.BACKBONES.NAME={cfg.MODEL.BACKBONES.NAME!r} has no res5 stage for a C4 head")
        in_features = cfg.MODEL.ROI_HEADS.IN_FEATURES
        if len(in_features) != 1:
            raise ValueError(f"a C4 head pools one feature map, MODEL.ROI_HEADS.IN_FEATURES is {in_features}")
        out_channels = model.feature("res5").channels
        return {**ROIHeads.from_config(cfg), "in_features": in_features,
                "pooler": _pooler(cfg, input_shape, in_features), "res5": model.res5,
                "final_norm": getattr(model, "final_norm", None), "channels_last": cfg.MODEL.BACKBONES.CHANNELS_LAST,
                "box_predictor": FastRCNNOutputLayers(cfg, ShapeSpec(channels=out_channels, height=1, width=1))}

    def _shared_roi_transform(self, features, boxes):
        x = self.pooler(features, boxes)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return final_activation(self.res5(x), self.final_norm)


@ROI_BOX_HEAD_REGISTRY.register()
class VGGFC67Head(nn.Module):
    """py-faster-rcnn's VGG-16 box head: fc6 (4096) - ReLU - dropout - fc7 (4096) - ReLU - dropout.

    Named `fc6` / `fc7` like the classifier of `backbones`' VGG, so MODEL.WEIGHTS initialises them from the
    ImageNet classifier (7x7 RoI pooling on conv5_3 gives fc6 its 512*7*7 inputs, as on ImageNet).
    """

    @configurable
    def __init__(self, *, fc6: nn.Linear, fc7: nn.Linear, dropout: float = 0.5):
        super().__init__()
        self.fc6, self.fc7 = fc6, fc7
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, cfg, input_shape, backbones_model: FeatureNet | None = None):
        model = backbones_model if backbones_model is not None else build_backbones_model(cfg)
        if not hasattr(model, "fc6"):
            raise ValueError(f"MODEL.BACKBONES.NAME={cfg.MODEL.BACKBONES.NAME!r} has no fc6/fc7 for VGGFC67Head")
        expected = model.fc6.in_features
        got = input_shape.channels * (input_shape.height or 1) * (input_shape.width or 1)
        if got != expected:
            raise ValueError(f"VGGFC67Head: RoI features of {input_shape.channels}x{input_shape.height}x"
                             f"{input_shape.width} = {got} values, fc6 takes {expected} (POOLER_RESOLUTION 7)")
        return {"fc6": model.fc6, "fc7": model.fc7, "dropout": cfg.MODEL.BACKBONES.FC_DROPOUT}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fc67(x, self.fc6, self.fc7, self.dropout)

    @property
    def output_shape(self) -> ShapeSpec:
        return ShapeSpec(channels=self.fc7.out_features)


@ROI_HEADS_REGISTRY.register()
class BackbonesVGGROIHeads(StandardROIHeads):
    """StandardROIHeads (py-faster-rcnn's Fast R-CNN head) whose box head is the VGG model's fc6/fc7."""

    @classmethod
    def from_config(cls, cfg, input_shape, backbones_model: FeatureNet | None = None):
        if cfg.MODEL.MASK_ON or cfg.MODEL.KEYPOINT_ON:
            raise ValueError("BackbonesVGGROIHeads is a box head: MODEL.MASK_ON / KEYPOINT_ON are not supported")
        in_features = cfg.MODEL.ROI_HEADS.IN_FEATURES
        channels = {input_shape[f].channels for f in in_features}
        if len(channels) != 1:
            raise ValueError(f"MODEL.ROI_HEADS.IN_FEATURES {in_features} have different channel counts {channels}")
        res = cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION
        box_head = VGGFC67Head(cfg, ShapeSpec(channels=channels.pop(), height=res, width=res),
                               backbones_model=backbones_model)
        return {**ROIHeads.from_config(cfg), "box_in_features": in_features,
                "box_pooler": _pooler(cfg, input_shape, in_features), "box_head": box_head,
                "box_predictor": FastRCNNOutputLayers(cfg, box_head.output_shape),
                "train_on_pred_boxes": cfg.MODEL.ROI_BOX_HEAD.TRAIN_ON_PRED_BOXES}
