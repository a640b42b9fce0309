"""ResNet and plain nets (He et al. 2016, Table 1 and Sec. 4.2), ImageNet and CIFAR variants.

A plain net is the same network with `shortcut="none"`: same depth, widths, parameters (minus projection
shortcuts) and FLOPs.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from .blocks import (
    BasicBlock,
    BottleneckBlock,
    Conv2dNorm,
    PreActBasicBlock,
    PreActBottleneckBlock,
)
from .features import FeatureNet
from .norm import freeze_, get_norm, resolve_norm
from .registry import ModelInfo, register_model
from .stages import make_stage
from .width import check_width, scale_channels

__all__ = ["ResNet", "resnet", "cifar_resnet", "final_activation", "IMAGENET_DEPTHS", "CIFAR_DEPTHS"]

# He et al. 2016, Tables 2 and 3: ImageNet val top-1 error (%), 10-crop testing (ResNet-34: option A shortcuts, ours).
IMAGENET_TOP1_ERROR = {name: (error, "He et al. 2016, Tables 2-3 (10-crop)") for name, error in (
    ("plain18", 27.94), ("plain34", 28.54), ("resnet18", 27.88), ("resnet34", 25.03), ("resnet50", 22.85),
    ("resnet101", 21.75), ("resnet152", 21.43))}
# depth -> blocks per stage (res2..res5), Table 1.
IMAGENET_DEPTHS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
CIFAR_DEPTHS = (20, 32, 44, 56, 110, 1202)  # 6n+2 with n = 3, 5, 7, 9, 18, 200


class ImageNetStem(nn.Module):
    """conv1 (7x7/2, 64) + norm + ReLU + 3x3/2 max pool: stride 4."""

    def __init__(self, in_channels: int = 3, out_channels: int = 64, *, norm: str = "BN"):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, 4
        self.conv1 = Conv2dNorm(in_channels, out_channels, 7, stride=2, padding=3, norm=norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.relu_(self.conv1(x)), kernel_size=3, stride=2, padding=1)

    def freeze(self) -> ImageNetStem:
        freeze_(self)
        return self


class CifarStem(nn.Module):
    """conv1 (3x3, 16) + norm + ReLU: stride 1. Pre-activation nets leave norm/ReLU to the first block."""

    def __init__(self, in_channels: int = 3, out_channels: int = 16, *, norm: str = "BN", activate: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, 1
        self.activate = activate
        self.conv1 = Conv2dNorm(in_channels, out_channels, 3, padding=1, norm=norm if activate else "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        return F.relu_(x) if self.activate else x

    def freeze(self) -> CifarStem:
        freeze_(self)
        return self


class ResNet(FeatureNet):
    """Stem, stages `res2`.. (stride in the name via feature_info), optional final norm, global pool, fc."""

    def __init__(self, stem: nn.Module, stages: dict[str, nn.Module], *, num_classes: int,
                 final_norm: nn.Module | None = None):
        super().__init__()
        self.add_stage("stem", stem, stem.out_channels, stem.stride)
        stride = stem.stride
        for name, stage in stages.items():
            stride *= stage.stride
            self.add_stage(name, stage, stage.out_channels, stride)
        self.num_features = self.feature_info[-1].channels
        # Pre-activation nets end with BN-ReLU (nothing normalizes the last addition otherwise).
        self.final_norm = final_norm
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else None

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(F.adaptive_avg_pool2d(final_activation(x, self.final_norm), 1), 1)
        return self.fc(x) if self.fc is not None else x

    def blocks(self):
        for name in self.stage_names[1:]:
            yield from getattr(self, name)

    def freeze(self, freeze_at: int) -> ResNet:
        """As FeatureNet.freeze; freezing every stage freezes the pre-activation final norm too (it belongs to the
        last stage's output)."""
        super().freeze(freeze_at)
        if freeze_at == len(self.stage_names) and self.final_norm is not None:
            self.final_norm = freeze_(self.final_norm)
        return self


def final_activation(x: torch.Tensor, final_norm: nn.Module | None) -> torch.Tensor:
    """The output of the last stage as the rest of the network sees it: BN-ReLU for pre-activation nets (nothing
    else normalizes the last addition), unchanged otherwise. Used by the classifier and by detection heads."""
    return F.relu(final_norm(x)) if final_norm is not None else x


def _init_weights(model: ResNet, zero_init_residual: bool) -> None:
    """He (MSRA) init for convs, BN to identity, fc ~ N(0, 0.01); optionally zero the last BN of each branch."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.SyncBatchNorm, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)
    if zero_init_residual:
        for block in model.blocks():
            if not block.is_residual:
                raise ValueError("zero_init_residual on a plain net would zero every block's output")
            norm = block.last_norm()
            if norm is None or not hasattr(norm, "weight"):
                raise ValueError(f"zero_init_residual needs a norm after the last conv of {type(block).__name__}")
            with torch.no_grad():
                norm.weight.zero_()


def _check_flags(**flags) -> None:
    """Boolean options must be bools: the string "False" is truthy and would silently mean True."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def _check_shortcut(residual: bool, shortcut: str | None, default: str) -> str:
    if not residual:
        if shortcut not in (None, "none"):
            raise ValueError(f"plain nets have no shortcut; got shortcut={shortcut!r}")
        return "none"
    shortcut = default if shortcut is None else shortcut
    if shortcut not in ("A", "B", "C"):
        raise ValueError(f"shortcut must be 'A', 'B' or 'C' (paper Table 3), got {shortcut!r}")
    return shortcut


def _arch_norm(norm: str, gn_groups: int | None) -> dict:
    """The norm as a net's `arch` records it: its name, and for GN the groups it was built with (a checkpoint's
    GN weights fit a net of other groups in shape, not in function: loading compares them)."""
    spec = resolve_norm(norm, gn_groups)
    return {"norm": norm} | ({"gn_groups": spec.groups} if norm == "GN" else {})


def resnet(depth: int, *, num_classes: int = 1000, residual: bool = True, shortcut: str | None = None,
           stride_in_1x1: bool = True, preact: bool = False, norm: str = "BN", freeze_at: int = 0,
           zero_init_residual: bool = False, in_channels: int = 3, width: float = 1.0,
           gn_groups: int | None = None) -> ResNet:
    """ImageNet ResNet / plain net of depth 18, 34, 50, 101 or 152 (paper Table 1).

    Args:
        residual: False builds the plain twin (no shortcuts).
        shortcut: "A", "B" (default; projection only where dims change) or "C" (paper Table 3).
        stride_in_1x1: bottleneck stride in the first 1x1 conv, as the original MSRA release and the paper's
            FLOPs (default); False puts it in the 3x3 (torchvision/timm "v1.5" weights).
        preact: pre-activation units (Identity Mappings, He et al. 2016).
        norm: "BN", "FrozenBN", "GN" or "SyncBN".
        freeze_at: freeze the stem (1) and res2.. (2..5): no gradients, FrozenBN.
        zero_init_residual: zero the last BN of each residual branch (Goyal et al.); off, as in the paper.
        width: multiplier of every channel count, stem included (1.0 = the paper's 64..2048; 0.25 = 16..512);
            depth, block types, strides and names stay the same (see backbones.width).
        gn_groups: GroupNorm's groups (norm="GN"; default 32, Wu & He's; fewer where a layer has fewer channels),
            recorded in `arch`: GN weights of other groups have the same shapes, not the same function.
    """
    if depth not in IMAGENET_DEPTHS:
        raise ValueError(f"ImageNet ResNet depth must be one of {sorted(IMAGENET_DEPTHS)}, got {depth}")
    width = check_width(width)
    _check_flags(residual=residual, stride_in_1x1=stride_in_1x1, preact=preact,
                 zero_init_residual=zero_init_residual)
    shortcut = _check_shortcut(residual, shortcut, "B")
    arch_norm = _arch_norm(norm, gn_groups)
    norm = resolve_norm(norm, gn_groups)
    bottleneck = depth >= 50
    if preact:
        block = PreActBottleneckBlock if bottleneck else PreActBasicBlock
    else:
        block = BottleneckBlock if bottleneck else BasicBlock
    expansion = 4 if bottleneck else 1
    stem_ch = scale_channels(64, width)
    stem = ImageNetStem(in_channels, stem_ch, norm=norm)
    stages, in_ch = {}, stem_ch
    for i, n in enumerate(IMAGENET_DEPTHS[depth]):
        out_ch = scale_channels(64 * 2**i * expansion, width)
        kwargs = dict(norm=norm, shortcut=shortcut, stride_per_block=[1 if i == 0 else 2] + [1] * (n - 1))
        if bottleneck:
            kwargs.update(bottleneck_channels=scale_channels(64 * 2**i, width), stride_in_1x1=stride_in_1x1)
        stages[f"res{i + 2}"] = make_stage(block, n, in_channels=in_ch, out_channels=out_ch, **kwargs)
        in_ch = out_ch
    model = ResNet(stem, stages, num_classes=num_classes, final_norm=get_norm(norm, in_ch) if preact else None)
    _init_weights(model, zero_init_residual)
    model.arch = dict(family="resnet", depth=depth, residual=residual, shortcut=shortcut,
                      stride_in_1x1=stride_in_1x1 if bottleneck else None, preact=preact, width=width, **arch_norm)
    return model.freeze(freeze_at)


def cifar_resnet(depth: int, *, num_classes: int = 10, residual: bool = True, shortcut: str | None = None,
                 preact: bool = False, norm: str = "BN", freeze_at: int = 0, zero_init_residual: bool = False,
                 in_channels: int = 3, width: float = 1.0, gn_groups: int | None = None) -> ResNet:
    """CIFAR ResNet / plain net of depth 6n+2 (paper Sec. 4.2): 3x3 conv (16), stages of 2n layers on maps
    32/16/8 with 16/32/64 filters (`res2`, `res3`, `res4`), global pool, fc. Option A shortcuts by default.
    `width` multiplies every channel count (see backbones.width)."""
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, 110, 1202, ...), got {depth}")
    width = check_width(width)
    _check_flags(residual=residual, preact=preact, zero_init_residual=zero_init_residual)
    n = (depth - 2) // 6
    shortcut = _check_shortcut(residual, shortcut, "A")
    arch_norm = _arch_norm(norm, gn_groups)
    norm = resolve_norm(norm, gn_groups)
    block = PreActBasicBlock if preact else BasicBlock
    stem_ch = scale_channels(16, width)
    stem = CifarStem(in_channels, stem_ch, norm=norm, activate=not preact)
    stages, in_ch = {}, stem_ch
    for i in range(3):
        out_ch = scale_channels(16 * 2**i, width)
        stages[f"res{i + 2}"] = make_stage(block, n, in_channels=in_ch, out_channels=out_ch, norm=norm,
                                           shortcut=shortcut, stride_per_block=[1 if i == 0 else 2] + [1] * (n - 1))
        in_ch = out_ch
    model = ResNet(stem, stages, num_classes=num_classes, final_norm=get_norm(norm, in_ch) if preact else None)
    _init_weights(model, zero_init_residual)
    model.arch = dict(family="cifar_resnet", depth=depth, residual=residual, shortcut=shortcut, preact=preact,
                      width=width, **arch_norm)
    return model.freeze(freeze_at)


def _register() -> None:
    def info(name: str, family: str, depth: int, residual: bool, *, cifar: bool = False) -> ModelInfo:
        return ModelInfo(name, family, depth, residual, normalized=True, reference_lr=0.1,
                         zero_init_residual=residual, detection_design=None if cifar else "C4",
                         input_size=32 if cifar else 224, eval_resize=None if cifar else 256,
                         first_conv="stem.conv1", classifier="fc", imagenet_top1_error=IMAGENET_TOP1_ERROR.get(name))

    for depth in IMAGENET_DEPTHS:
        register_model(f"resnet{depth}", partial(resnet, depth), info(f"resnet{depth}", "resnet", depth, True))
        register_model(f"plain{depth}", partial(resnet, depth, residual=False),
                       info(f"plain{depth}", "plain", depth, False))
    for depth in CIFAR_DEPTHS:
        register_model(f"cifar_resnet{depth}", partial(cifar_resnet, depth),
                       info(f"cifar_resnet{depth}", "cifar_resnet", depth, True, cifar=True))
        if depth != 1202:
            register_model(f"cifar_plain{depth}", partial(cifar_resnet, depth, residual=False),
                           info(f"cifar_plain{depth}", "cifar_plain", depth, False, cifar=True))


_register()
