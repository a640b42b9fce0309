"""Use any `backbones` model in torchvision's Faster R-CNN (no Detectron2 involved).

    from backbones.torchvision_detection import faster_rcnn
    model = faster_rcnn("resnet101", num_classes=21, design="C4", weights="R-101.pkl")   # the paper's detector
    model = faster_rcnn("resnet50", num_classes=91, weights_backbone="resnet50-0676ba61.pth",
                        trainable_backbone_layers=3)      # torchvision's names; its file, its stride placement
    model = faster_rcnn("plain34", num_classes=91, design="FPN")
    losses = model(images, targets)          # torchvision's detection API (images as lists of [0, 1] tensors)

design="C4": features from the trunk up to res4 (VGG: conv5_3), RoIAlign 14x14 and the net's own res5 stage +
global pooling as the box head (VGG: 7x7 RoIs into fc6/fc7), as in the ResNet paper. design="FPN": torchvision's
FPN on res2..res5 with its 2-fc head. torchvision's argument names work where they mean the same thing
(`weights_backbone`, `trainable_backbone_layers`, `num_classes`); any supported weights file works, BGR 0-255 ones
(MSRA, Detectron2) converted to torchvision's RGB [0, 1] input at load (faster_rcnn's docstring).
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn import functional as F

from .features import FeatureNet
from .input_convention import TORCHVISION_INPUT, InputNormalization, create_model_for_rgb_unit_input
from .registry import create_model, model_info
from .resnet import final_activation
from .vgg import fc67

__all__ = ["c4_backbone", "fpn_backbone", "faster_rcnn"]


def c4_backbone(model: FeatureNet) -> tuple[nn.Module, nn.Module, int, int]:
    """(trunk returning {"0": res4 / conv5}, per-RoI head, head output channels, RoI size) for a C4 detector."""
    from torchvision.models._utils import IntermediateLayerGetter

    if "res5" in model.stage_names:
        trunk = IntermediateLayerGetter(model, {"res4": "0"})
        trunk.out_channels = model.feature("res4").channels
        return trunk, _Res5Head(model.res5, getattr(model, "final_norm", None)), model.feature("res5").channels, 14
    if hasattr(model, "fc6"):  # VGG: conv5_3 features, 7x7 RoIs into the ImageNet fc6/fc7
        trunk = IntermediateLayerGetter(model, {"conv5": "0"})
        trunk.out_channels = model.feature("conv5").channels
        return trunk, _FC67Head(model.fc6, model.fc7, model.dropout), model.fc7.out_features, 7
    raise ValueError(f"{type(model).__name__} has neither res5 nor fc6/fc7 for a C4-style head")


class _Res5Head(nn.Module):
    """The net's own res5 (+ the pre-activation final BN-ReLU) and global pooling, per RoI."""

    def __init__(self, res5: nn.Module, final_norm: nn.Module | None):
        super().__init__()
        self.res5, self.final_norm = res5, final_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(final_activation(self.res5(x), self.final_norm), 1), 1)


class _FC67Head(nn.Module):
    """VGG's ImageNet fc6/fc7 on 7x7 RoIs (py-faster-rcnn's head)."""

    def __init__(self, fc6: nn.Linear, fc7: nn.Linear, dropout: nn.Module):
        super().__init__()
        self.fc6, self.fc7, self.dropout = fc6, fc7, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fc67(x, self.fc6, self.fc7, self.dropout)


def fpn_backbone(model: FeatureNet, in_features: tuple[str, ...] = ("res2", "res3", "res4", "res5"),
                 out_channels: int = 256) -> nn.Module:
    """torchvision's BackboneWithFPN over the named stages (feature maps "0".."3" plus "pool")."""
    from torchvision.models.detection.backbone_utils import BackboneWithFPN

    return BackboneWithFPN(model, {name: str(i) for i, name in enumerate(in_features)},
                           [model.feature(n).channels for n in in_features], out_channels)


def faster_rcnn(name: str, num_classes: int, *, design: str = "C4", weights: str | os.PathLike | None = None,
                weights_backbone: str | os.PathLike | None = None, trainable_backbone_layers: int | None = None,
                min_size: int = 600, max_size: int = 1000, **options) -> nn.Module:
    """A torchvision FasterRCNN (num_classes includes the background, torchvision's convention).

    weights (or torchvision's name for it, weights_backbone): the backbone's weights file, any format
        backbones.load_pretrained reads; its stride placement is taken from the file. The detector takes what
        torchvision's transform feeds, RGB in [0, 1]: BGR 0-255 weights (MSRA's, Detectron2's zoo) are converted at
        load (first conv's channels reversed, the file's mean / std as image_mean / image_std; exact), recorded as
        `model.input_normalization`. A torchvision weights enum or its name is refused with the file to pass.
    trainable_backbone_layers: torchvision's -- how many stages, counted from the last, train (0..5; res5 or conv5
        first); default 3 with weights (torchvision's, = Detectron2's FREEZE_AT 2), all without.
    With weights, a BN net's norms are frozen (FrozenBN), as torchvision's FrozenBatchNorm2d under pretrained
    weights; norm=... in `options` overrides.
    """
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    model, norm = _backbone(name, weights, weights_backbone, trainable_backbone_layers, options)
    common = dict(min_size=min_size, max_size=max_size, image_mean=list(norm.mean), image_std=list(norm.std))
    if design == "FPN":
        detector = FasterRCNN(fpn_backbone(model), num_classes=num_classes, **common)
    elif design == "C4":
        from torchvision.models.detection.anchor_utils import AnchorGenerator

        trunk, head, head_channels, roi = c4_backbone(model)
        anchors = AnchorGenerator(sizes=((128, 256, 512),), aspect_ratios=((0.5, 1.0, 2.0),))  # paper: 3 x 3
        detector = FasterRCNN(trunk, rpn_anchor_generator=anchors,
                              box_roi_pool=MultiScaleRoIAlign(["0"], output_size=roi, sampling_ratio=0),
                              box_head=head, box_predictor=FastRCNNPredictor(head_channels, num_classes), **common)
    else:
        raise ValueError(f"design must be 'C4' or 'FPN', got {design!r}")
    detector.input_normalization = norm
    return detector


def _backbone(name: str, weights, weights_backbone, trainable_backbone_layers: int | None, options: dict
              ) -> tuple[FeatureNet, InputNormalization]:
    """The backbone with its weights, the input it expects, and its frozen stages (faster_rcnn's arguments)."""
    if weights is not None and weights_backbone is not None:
        raise TypeError("pass weights or weights_backbone (torchvision's name for the same file), not both")
    argument = "weights" if weights is not None else "weights_backbone"
    path = weights if weights is not None else weights_backbone
    if path is None:
        model, norm = create_model(name, num_classes=0, **options), TORCHVISION_INPUT
    else:
        if model_info(name).normalized and "norm" not in options:
            options = {**options, "norm": "FrozenBN"}  # torchvision freezes BN statistics under pretrained weights
        model, norm = create_model_for_rgb_unit_input(name, path, argument=argument, num_classes=0, **options)
    stages = len(model.stage_names)
    if trainable_backbone_layers is None:
        trainable = 3 if path is not None else stages
    elif path is None:
        raise ValueError(f"trainable_backbone_layers={trainable_backbone_layers} without weights would freeze random "
                         "layers (torchvision ignores it with a warning): pass weights_backbone=FILE")
    elif isinstance(trainable_backbone_layers, bool) or not 0 <= trainable_backbone_layers <= stages:
        raise ValueError(f"trainable_backbone_layers={trainable_backbone_layers!r}: 0..{stages} for {name} "
                         f"(stages {model.stage_names})")
    else:
        trainable = trainable_backbone_layers
    return model.freeze(stages - trainable), norm
