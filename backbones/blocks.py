"""Building blocks of residual and plain nets.

A residual block computes y = relu(F(x) + shortcut(x)); its plain twin computes y = relu(F(x)): the *only*
difference is `shortcut="none"`, so plain and residual nets share every other layer, parameter and FLOP.
Parameter names follow Detectron2 (`conv1.weight`, `conv1.norm.*`, `shortcut.weight`, `shortcut.norm.*`) so
Detectron2 and MSRA checkpoints map onto them by renaming prefixes only.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .norm import FrozenBatchNorm2d, freeze_, get_norm

__all__ = [
    "SHORTCUTS",
    "Conv2dNorm",
    "set_norm_folding",
    "PadShortcut",
    "make_shortcut",
    "CNNBlockBase",
    "BasicBlock",
    "BottleneckBlock",
    "PreActBasicBlock",
    "PreActBottleneckBlock",
]

# Paper Table 3: A = identity, zero-padded where dims grow (no parameters); B = projection where dims change;
# C = projection everywhere. "none" = plain net (no shortcut at all).
SHORTCUTS = ("A", "B", "C", "none")


class Conv2dNorm(nn.Conv2d):
    """nn.Conv2d followed by an optional norm layer stored as `.norm` (Detectron2's Conv2d key layout).

    A norm that is an affine map -- FrozenBN always, BN / SyncBN in eval mode (running statistics) -- is folded
    into the convolution: one conv call with weight * scale and the shift as its bias, instead of a conv and a
    separate pass over the activation. Gradients reach the original weight through the scale; parameter names and
    values (the checkpoint) are unchanged. `fold_norm = False` (see `set_norm_folding`) runs them apart.
    """

    fold_norm = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = False, norm: str | None = ""):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        self.norm = get_norm(norm, out_channels) if norm else None

    def _foldable(self) -> bool:
        n = self.norm
        if isinstance(n, FrozenBatchNorm2d):
            return True
        return isinstance(n, nn.modules.batchnorm._BatchNorm) and not n.training and n.track_running_stats

    def folded_weight_and_bias(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The conv weight and bias equal to this conv followed by its (affine-map) norm."""
        n = self.norm
        if isinstance(n, FrozenBatchNorm2d):
            scale, shift = n.affine()
        else:  # eval-mode BN: its weight and bias may be trainable, so computed in the graph each time
            scale = (n.running_var + n.eps).rsqrt()
            if n.weight is not None:
                scale = scale * n.weight
            shift = -n.running_mean * scale
            if n.bias is not None:
                shift = shift + n.bias
        if self.bias is not None:
            shift = shift + self.bias * scale
        return self.weight * scale.reshape(-1, 1, 1, 1).to(self.weight.dtype), shift.to(self.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm is None:
            return super().forward(x)
        if self.fold_norm and self._foldable():
            return self._conv_forward(x, *self._folded_for_this_call())
        self.drop_folded_cache()  # BN in training updates its running statistics without a version bump
        return self.norm(super().forward(x))

    def _folded_for_this_call(self) -> tuple[torch.Tensor, torch.Tensor]:
        """With autograd on, the folded weight is built in the graph (gradients reach `weight`); under no_grad or
        inference_mode it is a constant of the current parameters and buffers, computed once per state of them and
        kept beside the module (one extra copy of the conv weight, until the next forward with autograd on, a
        `.to()` / `.cpu()` / `.half()` or `drop_folded_cache()`). A state is the storage, version counter, dtype and
        strides of the weight, bias and norm tensors: an optimizer step, `load_state_dict`, `copy_` or a replaced
        tensor recompute it; an in-place write through `.data` (`p.data.mul_(2)`) bypasses version counters and is
        not seen -- write under `torch.no_grad()` instead, as for FrozenBatchNorm2d.affine. Why: on a GPU the ~6
        small ops per conv per call made ResNet-50 inference 0.58x torchvision's (device check, H200, batch 32)."""
        if torch.is_grad_enabled():
            self.drop_folded_cache()  # training: the cache would only hold memory
            return self.folded_weight_and_bias()
        tensors = [t for t in (self.weight, self.bias, *self.norm.parameters(), *self.norm.buffers()) if t is not None]
        if any(t.is_inference() for t in tensors):  # no version counter to key on
            return self.folded_weight_and_bias()
        key = (torch.is_inference_mode_enabled(), self.norm.eps,
               *((t.data_ptr(), t._version, t.dtype, t.stride()) for t in tensors))
        cached = self.__dict__.get("_folded")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_folded"] = (key, self.folded_weight_and_bias())
        return cached[1]

    def drop_folded_cache(self) -> None:
        """Free the folded weight kept for no-grad calls (recomputed at the next one)."""
        self.__dict__.pop("_folded", None)

    def _apply(self, fn, recurse=True):  # .to(), .cuda(), .half(), channels_last: the cached copy is of the old tensors
        self.drop_folded_cache()
        return super()._apply(fn, recurse)

    def __getstate__(self):  # deepcopy and torch.save(model) carry no cached copy
        state = super().__getstate__()
        state.pop("_folded", None)
        return state


def set_norm_folding(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch folding of affine norms into their convolutions on or off for every Conv2dNorm of `model`."""
    for m in model.modules():
        if isinstance(m, Conv2dNorm):
            m.fold_norm = enabled
    return model


class PadShortcut(nn.Module):
    """Option A: subsample spatially by `stride`, zero-pad the new channels. No parameters."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        if out_channels < in_channels:
            raise ValueError(f"option A cannot reduce channels ({in_channels} -> {out_channels})")
        self.stride, self.pad = stride, out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.pad)) if self.pad else x

    def extra_repr(self) -> str:
        return f"stride={self.stride}, pad_channels={self.pad}"


def make_shortcut(kind: str, in_channels: int, out_channels: int, stride: int, norm: str | None,
                  *, projection_norm: bool = True) -> nn.Module | None:
    """Shortcut of a block. Returns None for plain nets ("none"), nn.Identity() where no change is needed."""
    if kind not in SHORTCUTS:
        raise ValueError(f"unknown shortcut {kind!r}; expected one of {SHORTCUTS}")
    if kind == "none":
        return None
    same = in_channels == out_channels and stride == 1
    if kind == "A":
        return nn.Identity() if same else PadShortcut(in_channels, out_channels, stride)
    if kind == "B" and same:
        return nn.Identity()
    return Conv2dNorm(in_channels, out_channels, 1, stride=stride, norm=norm if projection_norm else "")


class CNNBlockBase(nn.Module):
    """A block that knows its input/output channels and stride, and can freeze itself."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def freeze(self) -> CNNBlockBase:
        """No gradients and BN -> FrozenBN, as Detectron2's FREEZE_AT does for early stages."""
        freeze_(self)
        return self

    @property
    def is_residual(self) -> bool:
        return getattr(self, "shortcut", None) is not None

    def _add_shortcut(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.shortcut is not None:
            out += self.shortcut(x)  # in place, as Detectron2: no extra activation-sized buffer per block
        return out


class BasicBlock(CNNBlockBase):
    """Two 3x3 convs (ResNet-18/34, CIFAR nets)."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1, norm: str = "BN",
                 shortcut: str = "B"):
        super().__init__(in_channels, out_channels, stride)
        self.conv1 = Conv2dNorm(in_channels, out_channels, 3, stride=stride, padding=1, norm=norm)
        self.conv2 = Conv2dNorm(out_channels, out_channels, 3, padding=1, norm=norm)
        self.shortcut = make_shortcut(shortcut, in_channels, out_channels, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu_(self.conv1(x))
        out = self.conv2(out)
        return F.relu_(self._add_shortcut(out, x))

    def last_norm(self) -> nn.Module | None:
        return self.conv2.norm


class BottleneckBlock(CNNBlockBase):
    """1x1 reduce, 3x3, 1x1 expand (ResNet-50/101/152)."""

    def __init__(self, in_channels: int, out_channels: int, *, bottleneck_channels: int, stride: int = 1,
                 norm: str = "BN", shortcut: str = "B", stride_in_1x1: bool = True, dilation: int = 1,
                 num_groups: int = 1):
        super().__init__(in_channels, out_channels, stride)
        # stride_in_1x1=True: the MSRA release (and the paper's FLOPs); False: torchvision "v1.5" (3x3 strides).
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = Conv2dNorm(in_channels, bottleneck_channels, 1, stride=stride_1x1, norm=norm)
        self.conv2 = Conv2dNorm(bottleneck_channels, bottleneck_channels, 3, stride=stride_3x3,
                                padding=dilation, dilation=dilation, groups=num_groups, norm=norm)
        self.conv3 = Conv2dNorm(bottleneck_channels, out_channels, 1, norm=norm)
        self.shortcut = make_shortcut(shortcut, in_channels, out_channels, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu_(self.conv1(x))
        out = F.relu_(self.conv2(out))
        out = self.conv3(out)
        return F.relu_(self._add_shortcut(out, x))

    def last_norm(self) -> nn.Module | None:
        return self.conv3.norm


class PreActBasicBlock(CNNBlockBase):
    """Identity-mappings unit (He et al. 2016): BN-ReLU-conv twice, nothing after the addition.

    A projection (or option-A) shortcut where dims change takes the pre-activated input, as in the authors' code.
    """

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1, norm: str = "BN",
                 shortcut: str = "B"):
        super().__init__(in_channels, out_channels, stride)
        self.norm1 = get_norm(norm, in_channels)
        self.conv1 = Conv2dNorm(in_channels, out_channels, 3, stride=stride, padding=1, norm="")
        self.norm2 = get_norm(norm, out_channels)
        self.conv2 = Conv2dNorm(out_channels, out_channels, 3, padding=1, norm="")
        self.shortcut = make_shortcut(shortcut, in_channels, out_channels, stride, norm, projection_norm=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        out = self.conv2(F.relu_(self.norm2(self.conv1(pre))))
        if self.shortcut is None:
            return out
        return out + self.shortcut(x if isinstance(self.shortcut, nn.Identity) else pre)

    def last_norm(self) -> nn.Module | None:
        return None


class PreActBottleneckBlock(CNNBlockBase):
    """Pre-activation bottleneck: (BN-ReLU-conv) x3 with 1x1, 3x3, 1x1 convs."""

    def __init__(self, in_channels: int, out_channels: int, *, bottleneck_channels: int, stride: int = 1,
                 norm: str = "BN", shortcut: str = "B", stride_in_1x1: bool = True, dilation: int = 1,
                 num_groups: int = 1):
        super().__init__(in_channels, out_channels, stride)
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.norm1 = get_norm(norm, in_channels)
        self.conv1 = Conv2dNorm(in_channels, bottleneck_channels, 1, stride=stride_1x1, norm="")
        self.norm2 = get_norm(norm, bottleneck_channels)
        self.conv2 = Conv2dNorm(bottleneck_channels, bottleneck_channels, 3, stride=stride_3x3, padding=dilation,
                                dilation=dilation, groups=num_groups, norm="")
        self.norm3 = get_norm(norm, bottleneck_channels)
        self.conv3 = Conv2dNorm(bottleneck_channels, out_channels, 1, norm="")
        self.shortcut = make_shortcut(shortcut, in_channels, out_channels, stride, norm, projection_norm=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        out = self.conv1(pre)
        out = self.conv2(F.relu_(self.norm2(out)))
        out = self.conv3(F.relu_(self.norm3(out)))
        if self.shortcut is None:
            return out
        return out + self.shortcut(x if isinstance(self.shortcut, nn.Identity) else pre)

    def last_norm(self) -> nn.Module | None:
        return None
