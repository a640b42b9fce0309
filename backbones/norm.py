"""Normalization layers, named by a string resolved here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["FrozenBatchNorm2d", "get_norm", "freeze_", "calibrate_frozen_bn", "PRETRAINED_BN_SCALE", "NORMS",
           "BN_VARIANTS", "GN_GROUPS", "GroupNormSpec", "UnevenGroupsError", "resolve_norm"]

NORMS = ("BN", "FrozenBN", "GN", "SyncBN", "")
# One set of tensors (weight, bias, running statistics) under three behaviours: a checkpoint of one loads into
# another, and a net "with BN" (vgg16_bn) is the same net with any of them. GN has other tensors.
BN_VARIANTS = frozenset({"BN", "FrozenBN", "SyncBN"})


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm2d with fixed statistics and affine parameters (buffers, not parameters).

    The paper's detector freezes BN at the ImageNet values: with 1-2 images per GPU, batch statistics are noise.
    State-dict keys match nn.BatchNorm2d (weight, bias, running_mean, running_var), so BN checkpoints load as is.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features) - eps)

    def affine(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, shift) with FrozenBN(x) = x * scale + shift per channel, computed once per state of the buffers.

        The buffers change only by replacement (`.to()`, assignment) or in-place writes (`load_state_dict`,
        `copy_`), which bump their version counters: either recomputes. Writes through `.data` bypass version
        counters (as they bypass autograd) and are not seen -- load or `copy_` under `torch.no_grad()` instead.
        Why: per conv and iteration the 5 small ops (rsqrt, mul, neg, mul, add) cost more than the conv at 8x8.
        """
        buffers = (self.weight, self.bias, self.running_mean, self.running_var)
        key = (self.eps, *(b._version for b in buffers))
        cached = self.__dict__.get("_affine")
        if cached is None or cached[1] != key or any(a is not b for a, b in zip(cached[0], buffers)):
            with torch.no_grad():
                scale = self.weight * (self.running_var + self.eps).rsqrt()
                shift = self.bias - self.running_mean * scale
            cached = self.__dict__["_affine"] = (buffers, key, scale, shift)
        return cached[2], cached[3]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.requires_grad:  # inference: one fused kernel (and Detectron2's exact numerics)
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        # training: F.batch_norm's backward would also compute (unused) gradients for weight/bias
        scale, shift = self.affine()
        return x * scale.reshape(1, -1, 1, 1).to(x.dtype) + shift.reshape(1, -1, 1, 1).to(x.dtype)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        state_dict.pop(prefix + "num_batches_tracked", None)  # written by nn.BatchNorm2d, meaningless here
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"

    @classmethod
    def convert_frozen_batchnorm(cls, module: nn.Module) -> nn.Module:
        """Return `module` with every BatchNorm2d / SyncBatchNorm replaced by a FrozenBatchNorm2d (recursively)."""
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            frozen = cls(module.num_features, module.eps)
            if module.affine:
                frozen.weight.copy_(module.weight.detach())
                frozen.bias.copy_(module.bias.detach())
            if module.track_running_stats:
                frozen.running_mean.copy_(module.running_mean)
                frozen.running_var.copy_(module.running_var)
            return frozen
        for name, child in module.named_children():
            new = cls.convert_frozen_batchnorm(child)
            if new is not child:
                module.add_module(name, new)
        return module


GN_GROUPS = 32  # Wu & He 2018's groups at the published widths (their Table 3: 32 groups, 2-16 channels each)


@dataclass(frozen=True)
class GroupNormSpec:
    """norm="GN" with its number of groups, as a builder resolves its options and passes it to every layer."""

    groups: int


def resolve_norm(norm: str, gn_groups: int | None) -> str | GroupNormSpec:
    """What a builder passes to its layers for its `norm` option: GN with `gn_groups` groups (None: Wu & He's 32,
    at every width -- at width 0.25 some layers then have 1 channel a group; 32 x width groups, the channels per
    group of the full-width net, left ResNet-101 at chance in 2 of 3 seeds of 32-px pretraining: CONVERGENCE.md),
    any other norm as named. ValueError for gn_groups without GN or below 1."""
    if norm != "GN":
        if gn_groups is not None:
            raise ValueError(f"gn_groups={gn_groups}: only norm='GN' has groups (norm={norm!r})")
        return norm
    if gn_groups is not None and (isinstance(gn_groups, bool) or not isinstance(gn_groups, int) or gn_groups < 1):
        raise ValueError(f"gn_groups must be a whole number >= 1, got {gn_groups!r}")
    return GroupNormSpec(gn_groups or GN_GROUPS)


class UnevenGroupsError(ValueError):
    """A GN layer whose channels its groups do not split evenly (its fields for a caller that names its own key)."""

    def __init__(self, channels: int, groups: int):
        self.channels, self.groups = channels, groups
        super().__init__(f"GroupNorm: {channels} channels do not split into {min(groups, channels)} groups "
                         f"(gn_groups {groups}); pass gn_groups that divides every layer's channels")


def _group_count(channels: int, groups: int) -> int:
    """`groups`, or `channels` where a layer has fewer (a 16-channel layer: min(G, C) as before); UnevenGroupsError
    where they do not split the channels evenly (an odd width: rather than a silently other grouping)."""
    g = min(groups, channels)
    if channels % g:
        raise UnevenGroupsError(channels, groups)
    return g


def get_norm(norm: str | GroupNormSpec | None, channels: int) -> nn.Module:
    """Build the norm layer named `norm` for `channels` channels.

    "BN": BatchNorm2d; "FrozenBN": FrozenBatchNorm2d; "GN": GroupNorm with 32 groups (Wu & He 2018), a
    GroupNormSpec: with its groups (either: capped by a layer's channels; a count that does not divide them is
    refused, ValueError);
    "SyncBN": SyncBatchNorm (cross-process statistics under DDP); "" or None: no normalization (VGG).
    """
    if isinstance(norm, GroupNormSpec):
        return nn.GroupNorm(_group_count(channels, norm.groups), channels)
    if norm is None or norm == "":
        return nn.Identity()
    if norm == "BN":
        return nn.BatchNorm2d(channels)
    if norm == "FrozenBN":
        return FrozenBatchNorm2d(channels)
    if norm == "GN":
        return nn.GroupNorm(_group_count(channels, GN_GROUPS), channels)
    if norm == "SyncBN":
        return nn.SyncBatchNorm(channels)
    raise ValueError(f"unknown norm {norm!r}; expected one of {', '.join(repr(n) for n in NORMS)}")


PRETRAINED_BN_SCALE = 0.2  # about what a trained net's BN weights are; a random init's 1.0 overflows a deep trunk


def calibrate_frozen_bn(model: nn.Module, *, frozen_bn: type = FrozenBatchNorm2d,
                        scale: float = PRETRAINED_BN_SCALE) -> nn.Module:
    """FrozenBN scales of a pretrained net instead of a random init's, so that a random deep trunk does not overflow
    as a real checkpoint would not: what a timing of a pretrained leg without its checkpoint needs. `frozen_bn`: the
    class to find (tools/detection_leg_worker.py loads this file by path inside another source tree and passes
    that tree's class); this module imports only torch for that reason."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, frozen_bn):
                m.weight.fill_(scale)
    return model


def freeze_(module: nn.Module) -> nn.Module:
    """Freeze `module` in place: no gradients, BatchNorm replaced by FrozenBatchNorm2d. Returns the module."""
    for p in module.parameters():
        p.requires_grad_(False)
    return FrozenBatchNorm2d.convert_frozen_batchnorm(module)
