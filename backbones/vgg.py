"""VGG 11/13/16/19 (Simonyan & Zisserman 2015), with optional BN, as five named conv stages and fc6/fc7/fc.

Stage `convK` is pool(K-1) (for K > 1) followed by the convK_x layers, so `conv5` is conv5_3 at stride 16:
the detection feature of py-faster-rcnn (pool5 dropped). pool5 belongs to the classifier head, with fc6/fc7
(4096-d, dropout 0.5) exposed as `fc6` / `fc7` for the detector's RoI head.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from .blocks import Conv2dNorm
from .features import FeatureNet
from .norm import resolve_norm
from .registry import ModelInfo, register_model
from .stages import Stage
from .width import check_width, scale_channels

__all__ = ["VGG", "vgg", "fc67", "VGG_DEPTHS", "VGG_FC_DIM"]

# ImageNet val top-1 error (%): VGG-16 as He et al. 2016 Table 3 reports it (10-crop); the BN variants, which no paper
# of ours reports, from torchvision's weights (VGG*_BN_Weights.IMAGENET1K_V1, single crop).
IMAGENET_TOP1_ERROR = {"vgg16": (28.07, "He et al. 2016, Table 3 (10-crop)"),
                       **{f"vgg{d}_bn": (round(100 - acc, 3), f"torchvision VGG{d}_BN_Weights.IMAGENET1K_V1 (1 crop)")
                          for d, acc in ((11, 70.370), (13, 71.586), (16, 73.360), (19, 74.218))}}
VGG_DEPTHS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
VGG_WIDTHS = (64, 128, 256, 512, 512)
VGG_FC_DIM = 4096  # fc6 / fc7


class VGG(FeatureNet):
    def __init__(self, convs_per_stage, *, num_classes: int = 1000, norm: str = "", dropout: float = 0.5,
                 in_channels: int = 3, width: float = 1.0):
        super().__init__()
        stride = 1
        widths = [scale_channels(c, width) for c in VGG_WIDTHS]
        for k, (n, width_k) in enumerate(zip(convs_per_stage, widths), start=1):
            layers, stage_in = OrderedDict(), in_channels
            if k > 1:
                layers[f"pool{k - 1}"] = nn.MaxPool2d(2, 2)
                stride *= 2
            for i in range(1, n + 1):
                # Convs keep their bias even with BN, as torchvision's vgg*_bn (so its weights load as is).
                layers[f"conv{k}_{i}"] = Conv2dNorm(in_channels, width_k, 3, padding=1, bias=True, norm=norm)
                layers[f"relu{k}_{i}"] = nn.ReLU(inplace=True)
                in_channels = width_k
            self.add_stage(f"conv{k}", Stage(layers, in_channels=stage_in, out_channels=width_k, stride=stride),
                           width_k, stride)
        fc_dim = scale_channels(VGG_FC_DIM, width)
        self.num_features = fc_dim
        self.pool5 = nn.MaxPool2d(2, 2)
        self.fc6 = nn.Linear(widths[-1] * 7 * 7, fc_dim)
        self.fc7 = nn.Linear(fc_dim, fc_dim)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(fc_dim, num_classes) if num_classes > 0 else None

    def forward_head(self, x: torch.Tensor, *, fold_1x1_pool5: bool = True) -> torch.Tensor:
        x = self.pre_logits(x, fold_1x1_pool5=fold_1x1_pool5)
        return self.fc(x) if self.fc is not None else x

    def pre_logits(self, x: torch.Tensor, *, fold_1x1_pool5: bool = True) -> torch.Tensor:
        """pool5 -> fc6 -> fc7 (with their dropout): the features the classifier reads (num_features of them)."""
        # Adaptive pooling to 7x7 (identity at 224x224) lets any input size reach fc6, as torchvision does; a 1x1
        # pool5 (inputs of 32-63 px) goes to fc67 as it is, which treats it as the 7x7 map of copies it would become.
        # fold_1x1_pool5=False takes torchvision's path (49 pooled copies): the same numbers, the reference for tests
        # and benchmarks.
        x = self.pool5(x)
        if x.shape[-2:] != (1, 1) or not fold_1x1_pool5:
            x = F.adaptive_avg_pool2d(x, (7, 7))
        return fc67(x, self.fc6, self.fc7, self.dropout)



def fc67(x: torch.Tensor, fc6: nn.Linear, fc7: nn.Linear, dropout: nn.Module) -> torch.Tensor:
    """fc6 - ReLU - dropout - fc7 - ReLU - dropout on (N, C, 7, 7) maps: VGG's classifier body, and py-faster-rcnn's
    RoI head on 7x7 RoIs of conv5_3 (the same layers, so ImageNet weights carry over).

    An (N, C, 1, 1) map stands for the 7x7 map of 49 copies that adaptive pooling makes of it; fc6 over 49 copies is
    fc6 with its weight summed over the 49 positions -- the same function and gradients with 49x fewer mult-adds in
    fc6 (a quarter of VGG-16's training step at 32 px, where pool5 is 1x1)."""
    if x.shape[-2:] == (1, 1) and fc6.in_features == 49 * x.shape[1]:
        x = F.linear(x.flatten(1), fc6.weight.unflatten(1, (x.shape[1], 49)).sum(2), fc6.bias)
    else:
        x = fc6(torch.flatten(x, 1))
    x = dropout(F.relu_(x))
    return dropout(F.relu_(fc7(x)))


def vgg(depth: int, *, num_classes: int = 1000, norm: str = "", dropout: float = 0.5, freeze_at: int = 0,
        in_channels: int = 3, width: float = 1.0, gn_groups: int | None = None) -> VGG:
    """VGG-`depth` (11, 13, 16, 19). norm="BN" gives the *_bn variant; freeze_at=2 freezes conv1..conv2
    (py-faster-rcnn's VGG-16 setting); `width` multiplies every conv's channels and fc6/fc7 (backbones.width)."""
    if depth not in VGG_DEPTHS:
        raise ValueError(f"VGG depth must be one of {sorted(VGG_DEPTHS)}, got {depth}")
    width = check_width(width)
    spec = resolve_norm(norm, gn_groups)  # GN: gn_groups, or 32
    model = VGG(VGG_DEPTHS[depth], num_classes=num_classes, norm=spec, dropout=dropout, in_channels=in_channels,
                width=width)
    for m in model.modules():  # torchvision's VGG init
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    model.arch = dict(family="vgg", depth=depth, norm=norm, width=width) | (
        {"gn_groups": spec.groups} if norm == "GN" else {})
    return model.freeze(freeze_at)


def _register() -> None:
    for depth in VGG_DEPTHS:
        for name, norm in ((f"vgg{depth}", ""), (f"vgg{depth}_bn", "BN")):
            register_model(name, partial(vgg, depth, norm=norm) if norm else partial(vgg, depth),
                           ModelInfo(name, "vgg", depth, residual=False, normalized=bool(norm), reference_lr=0.01,
                                     zero_init_residual=False, detection_design="vgg_fc", input_size=224,
                                     eval_resize=256, first_conv="conv1.conv1_1", classifier="fc",
                                     imagenet_top1_error=IMAGENET_TOP1_ERROR.get(name)))


_register()
