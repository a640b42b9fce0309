"""BackbonesRCNN: Detectron2's GeneralizedRCNN whose trunk and RoI head are one `backbones` model, built once.

The model named by MODEL.BACKBONES is built here; the trunk takes its stages up to OUT_FEATURES (FPN wraps that
trunk), the C4 head its res5 (+ pre-activation final norm), the VGG head its fc6/fc7 -- the same module objects,
so the network is one, and pretrained weights loaded into `backbones_model` are the detector's (see
BackbonesCheckpointer). Parameter names are GeneralizedRCNN's: backbone.*, proposal_generator.*, roi_heads.*.
"""

from __future__ import annotations

import inspect

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, ROI_HEADS_REGISTRY, GeneralizedRCNN, build_roi_heads
from detectron2.modeling.proposal_generator import build_proposal_generator

from backbones import FeatureNet

from ..detectron2_keys import resolved
from .backbone import build_backbones_model, fpn_from_trunk, trunk_from_model

__all__ = ["BackbonesRCNN"]

# MODEL.BACKBONE.NAME of this plugin -> how the Detectron2 backbone is made from the trunk
_BACKBONE_DESIGNS = {"build_backbones_trunk": lambda cfg, trunk: trunk,
                     "build_backbones_fpn_backbone": fpn_from_trunk}


@META_ARCH_REGISTRY.register()
class BackbonesRCNN(GeneralizedRCNN):
    @configurable
    def __init__(self, *, backbones_model: FeatureNet, **kwargs):
        super().__init__(**kwargs)
        # Not a submodule: its parameters are already registered under backbone.* and roi_heads.* .
        self.__dict__["backbones_model"] = backbones_model

    @classmethod
    def from_config(cls, cfg):
        cfg = resolved(cfg)  # Detectron2's MODEL.BACKBONE / MODEL.RESNETS keys drive ours or are refused (all parts)
        design = _BACKBONE_DESIGNS.get(cfg.MODEL.BACKBONE.NAME)
        if design is None:
            raise ValueError(f"META_ARCHITECTURE BackbonesRCNN needs MODEL.BACKBONE.NAME in {sorted(_BACKBONE_DESIGNS)}"
                             f", got {cfg.MODEL.BACKBONE.NAME!r}")
        model = build_backbones_model(cfg)
        backbone = design(cfg, trunk_from_model(cfg, model))
        shapes = backbone.output_shape()
        head_cls = ROI_HEADS_REGISTRY.get(cfg.MODEL.ROI_HEADS.NAME)
        if "backbones_model" in inspect.signature(head_cls.from_config).parameters:  # our heads: share the model
            roi_heads = head_cls(cfg, shapes, backbones_model=model)
        else:  # Detectron2's own heads (FPN's 2-fc head) have no layers of the backbone
            roi_heads = build_roi_heads(cfg, shapes)
        rpn = build_proposal_generator(cfg, shapes)
        if cfg.MODEL.BACKBONES.CHANNELS_LAST:  # its input is the trunk's channels_last features: in NCHW its 3x3
            rpn = rpn.to(memory_format=torch.channels_last)  # conv's weight was converted twice per iteration
        return {"backbone": backbone, "proposal_generator": rpn,
                "roi_heads": roi_heads, "input_format": cfg.INPUT.FORMAT, "vis_period": cfg.VIS_PERIOD,
                "pixel_mean": cfg.MODEL.PIXEL_MEAN, "pixel_std": cfg.MODEL.PIXEL_STD, "backbones_model": model}
