"""Backbone adapters: any `backbones` model as a Detectron2 `Backbone`, built from MODEL.BACKBONES.*.

`BackbonesRCNN` (meta_arch.py) builds the `backbones` model once and hands its stages to the trunk here and to the
RoI head; the registered builders below (`build_backbones_trunk`, `build_backbones_fpn_backbone`) build a model of
their own, for use in any other Detectron2 meta-architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from detectron2.layers import ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY, Backbone
from detectron2.modeling.backbone.fpn import FPN, LastLevelMaxPool

from backbones import FeatureNet, create_model, model_info
from backbones.features import run_stages

from ..detectron2_keys import net_norm, resolved

__all__ = ["BackboneSpec", "BackbonesTrunk", "backbone_spec_from_cfg", "build_backbones_model",
           "trunk_from_model", "fpn_from_trunk", "build_backbones_trunk", "build_backbones_fpn_backbone"]


@dataclass(frozen=True)
class BackboneSpec:
    """How the detector's `backbones` model is built (from MODEL.BACKBONES.*)."""

    name: str
    options: dict = field(default_factory=dict)
    strict_load: bool = True

    def build(self) -> FeatureNet:
        return create_model(self.name, num_classes=0, **self.options)


def backbone_spec_from_cfg(cfg) -> BackboneSpec:
    """The net of MODEL.BACKBONES.* (with Detectron2's MODEL.BACKBONE.FREEZE_AT / MODEL.RESNETS.* resolved into it:
    a config made without detection.get_detection_cfg gets the same net)."""
    b = resolved(cfg).MODEL.BACKBONES
    # vgg16_bn's BN layers take MODEL.BACKBONES.NORM. vgg16 has none, so a BN variant (the config's default,
    # FrozenBN) leaves it without norm, as the paper ran it; GN is added to every conv, as the pretraining net of a
    # GN arm has it (the main job pretrains and fine-tunes VGG-16 with GN: both must build the same net).
    options = {"norm": net_norm(b.NAME, b.NORM), "freeze_at": b.FREEZE_AT, "width": b.WIDTH}
    info = model_info(b.NAME)
    if info.family == "vgg":
        options["dropout"] = b.FC_DROPOUT
    else:
        options.update(preact=b.PREACT, stride_in_1x1=b.STRIDE_IN_1X1)
        if b.SHORTCUT:
            options["shortcut"] = b.SHORTCUT
        if b.ZERO_INIT_RESIDUAL:
            options["zero_init_residual"] = True
    if options["norm"] == "GN":
        options["gn_groups"] = b.GN_GROUPS
    return BackboneSpec(b.NAME, options, b.STRICT_LOAD)


def build_backbones_model(cfg) -> FeatureNet:
    """The `backbones` model named by MODEL.BACKBONES.NAME, with its options from the config (no classifier);
    conv weights in channels_last when MODEL.BACKBONES.CHANNELS_LAST."""
    model = backbone_spec_from_cfg(cfg).build()
    return model.to(memory_format=torch.channels_last) if cfg.MODEL.BACKBONES.CHANNELS_LAST else model


class BackbonesTrunk(Backbone):
    """The stages of a `backbones` model up to the last of `out_features`, as a Detectron2 Backbone.

    The stages keep their names (`stem`, `res2`, ...; `conv1`.. for VGG), so parameter names are Detectron2's
    (`backbone.res2.0.conv1.weight`). Stages after the last requested one are not kept (C4: res5 belongs to the
    RoI head).
    """

    def __init__(self, model: FeatureNet, out_features: list[str], *, channels_last: bool = False):
        super().__init__()
        self.channels_last = channels_last  # convert the input (the weights are converted with the model)
        names = model.stage_names
        unknown = [f for f in out_features if f not in names]
        if unknown:
            raise ValueError(f"MODEL.BACKBONES.OUT_FEATURES {unknown} not in {type(model).__name__} stages {names}")
        last = max(names.index(f) for f in out_features)
        self.stage_names = names[: last + 1]
        for name in self.stage_names:
            self.add_module(name, getattr(model, name))
        info = {f.name: f for f in model.feature_info}
        self._out_features = list(out_features)
        self._out_feature_channels = {f: info[f].channels for f in out_features}
        self._out_feature_strides = {f: info[f].stride for f in out_features}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if x.dim() != 4:
            raise ValueError(f"expected a (N, C, H, W) batch, got shape {tuple(x.shape)}")
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return dict(run_stages(((n, getattr(self, n)) for n in self.stage_names), x, self._out_features))


def trunk_from_model(cfg, model: FeatureNet) -> BackbonesTrunk:
    return BackbonesTrunk(model, list(cfg.MODEL.BACKBONES.OUT_FEATURES),
                          channels_last=cfg.MODEL.BACKBONES.CHANNELS_LAST)


def fpn_from_trunk(cfg, bottom_up: BackbonesTrunk) -> FPN:
    """Detectron2's FPN on res2..res5 of a `backbones` ResNet / plain net."""
    return FPN(bottom_up=bottom_up, in_features=cfg.MODEL.FPN.IN_FEATURES, out_channels=cfg.MODEL.FPN.OUT_CHANNELS,
               norm=cfg.MODEL.FPN.NORM, top_block=LastLevelMaxPool(), fuse_type=cfg.MODEL.FPN.FUSE_TYPE)


def _check_input(input_shape: ShapeSpec) -> None:
    if input_shape.channels != 3:
        raise ValueError(f"backbones models take 3 input channels, the config gives {input_shape.channels}")


@BACKBONE_REGISTRY.register()
def build_backbones_trunk(cfg, input_shape: ShapeSpec) -> BackbonesTrunk:
    """C4 and VGG detectors: shared features from the trunk (ResNet up to res4, VGG up to conv5_3; stride 16)."""
    _check_input(input_shape)
    cfg = resolved(cfg)  # Detectron2's MODEL.BACKBONE / MODEL.RESNETS keys drive ours or are refused
    return trunk_from_model(cfg, build_backbones_model(cfg))


@BACKBONE_REGISTRY.register()
def build_backbones_fpn_backbone(cfg, input_shape: ShapeSpec) -> FPN:
    """Detectron2's FPN on res2..res5 of a `backbones` ResNet / plain net."""
    _check_input(input_shape)
    cfg = resolved(cfg)
    return fpn_from_trunk(cfg, trunk_from_model(cfg, build_backbones_model(cfg)))
