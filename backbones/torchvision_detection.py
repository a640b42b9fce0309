"""Use any `backbones` model in torchvision's Faster R-CNN (no Detectron2 involved).

    from backbones.torchvision_detection import faster_rcnn
    model = faster_rcnn("resnet101", num_classes=21, design="C4", weights="R-101.pkl")   # the paper's detector
    model = faster_rcnn("plain34", num_classes=91, design="FPN")
    losses = model(images, targets)          # torchvision's detection API (images as lists of [0, 1] tensors)

design="C4": features from the trunk up to res4 (VGG: conv5_3), RoIAlign 14x14 and the net's own res5 stage +
global pooling as the box head (VGG: 7x7 RoIs into fc6/fc7), as in the ResNet paper. design="FPN": torchvision's
FPN on res2..res5 with its 2-fc head. `weights` goes through `backbones.load_pretrained` (any supported format);
the normalisation torchvision applies is set from the weights' metadata when they have it.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn import functional as F

from .features import FeatureNet
from .pretrained import load_pretrained
from .registry import create_model
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
                min_size: int = 600, max_size: int = 1000, **options) -> nn.Module:
    """A torchvision FasterRCNN (num_classes includes the background, torchvision's convention)."""
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    model = create_model(name, num_classes=0, **options)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # torchvision's defaults (RGB, [0, 1] inputs)
    if weights is not None:
        report = load_pretrained(model, weights, drop_classifier=True)
        meta = report.meta
        if meta.pixel_mean and meta.input_format == "RGB":
            mean, std = tuple(m / 255 for m in meta.pixel_mean), tuple(s / 255 for s in meta.pixel_std)
        elif meta.input_format == "BGR":
            raise ValueError(f"{weights}: BGR weights (MSRA/Caffe); torchvision feeds RGB. Convert the first conv "
                             "or use the Detectron2 plugin (detection/), which sets INPUT.FORMAT from the weights.")
    common = dict(min_size=min_size, max_size=max_size, image_mean=list(mean), image_std=list(std))
    if design == "FPN":
        return FasterRCNN(fpn_backbone(model), num_classes=num_classes, **common)
    if design != "C4":
        raise ValueError(f"design must be 'C4' or 'FPN', got {design!r}")
    trunk, head, head_channels, roi = c4_backbone(model)
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    anchors = AnchorGenerator(sizes=((128, 256, 512),), aspect_ratios=((0.5, 1.0, 2.0),))  # paper: 3 x 3 anchors
    return FasterRCNN(trunk, rpn_anchor_generator=anchors,
                      box_roi_pool=MultiScaleRoIAlign(["0"], output_size=roi, sampling_ratio=0),
                      box_head=head, box_predictor=FastRCNNPredictor(head_channels, num_classes), **common)
