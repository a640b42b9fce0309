"""timm's model contract on our nets: what code written for `timm.create_model` calls on the model it gets.

    net = timm.create_model("rdb_resnet50", num_classes=0, global_pool="avg", drop_rate=0.2)
    net.forward_head(net.forward_features(x), pre_logits=True)     # (N, net.num_features)
    net.reset_classifier(10); net.set_grad_checkpointing(); net.group_matcher()
    final, maps = net.forward_intermediates(x, indices=3)          # the last 3 stages' maps

`TimmResNet` / `TimmVGG` are our ResNet / VGG with timm's methods: `as_timm_model` re-classes a built net (as
torch.nn.utils.parametrize does), so its parameter names, `arch`, init and weights are untouched and a checkpoint
loads into either. What differs from our own API, and why it is not ours: `forward_features(x)` returns the last
stage's map (timm's contract; ours returns every stage by name -- `stage_features` keeps it), and a pre-activation
net applies its final BN-ReLU there, as timm's ResNetV2. The stem is the paper's (Table 1, and Detectron2's): its
output follows the max pool, so `feature_info[0]` has reduction 4 where timm's resnet reports its pre-pool act1 at 2.

Needs timm (the `timm` extra): the pooling, checkpointing and index helpers are timm's own.
"""

from __future__ import annotations

import torch
import torch.utils.checkpoint
from timm.layers import SelectAdaptivePool2d
from timm.models import checkpoint_seq
from torch import nn
from torch.nn import functional as F
from torch.nn.modules.module import _IncompatibleKeys

from .features import FeatureNet
from .pretrained import IncompatibleWeightsError, load_state_dict_into, meta_for_format
from .resnet import ResNet, final_activation
from .vgg import VGG
from .weight_formats import detect_format

__all__ = ["TimmResNet", "TimmVGG", "as_timm_model"]


class _TimmContract:
    """The methods timm's models share (timm.models.resnet.ResNet's set), over FeatureNet's stages."""

    grad_checkpointing = False
    stage_features = FeatureNet.forward_features  # our API: every stage's map by name

    @property
    def head_hidden_size(self) -> int:
        return self.num_features

    def _last_map(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _run_stage(self, name: str, x: torch.Tensor) -> torch.Tensor:
        stage = getattr(self, name)
        if self.grad_checkpointing and isinstance(stage, nn.Sequential) and not torch.jit.is_scripting():
            return checkpoint_seq(stage, x)  # per block, as timm's ResNet
        return stage(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.stage_names:
            x = self._run_stage(name, x)
        return self._last_map(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor, indices: int | list[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW", intermediates_only: bool = False):
        """timm's forward_intermediates: the maps of the stages `indices` picks (None: all, int n: the last n), and
        unless intermediates_only the final features; norm=True gives the last stage's map after the final norm
        (pre-activation nets)."""
        if output_fmt != "NCHW":
            raise ValueError(f"output_fmt={output_fmt!r}: these nets give NCHW maps only")
        names = self.stage_names
        take = _take_indices(len(names), indices)
        max_index = max(take)
        intermediates = []
        for i, name in enumerate(names[:max_index + 1] if stop_early or intermediates_only else names):
            x = self._run_stage(name, x)
            if i in take:
                intermediates.append(self._last_map(x) if norm and i == len(names) - 1 else x)
        if intermediates_only:
            return intermediates
        return (self._last_map(x) if i == len(names) - 1 else x), intermediates  # stopped early: no final norm

    def get_classifier(self) -> nn.Module:
        return self.fc if self.fc is not None else nn.Identity()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """nn.Module's, for our own names (a checkpoint of this net, EMA copies, timm's resume); another format's
        names (timm.create_model(..., checkpoint_path=) with a torchvision file) are converted by backbones' loader.
        Tensors alone cannot say what a file's metadata would (timm's loader drops it): a format whose channel order
        is BGR or unknown (MSRA, Detectron2) is refused here -- `pretrained_cfg_overlay=dict(file=PATH)` reads the
        file and converts it for RGB input. A file in our own names cannot be told apart: one converted from BGR
        weights (tools/convert_weights.py of an MSRA .pkl) says so only in the metadata timm's loader drops, so
        pass such files by pretrained_cfg_overlay too (timm_models' docstring says so).
        strict=False forgives missing and unexpected keys, never a convention, shape or value that does not fit."""
        own = set(super().state_dict())
        if assign or set(state_dict) <= own:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        fmt = detect_format(state_dict, {})
        meta = meta_for_format(fmt, {})
        if meta.input_format != "RGB":
            raise ValueError(f"a {fmt} state dict ({'BGR' if meta.input_format else 'channel order unknown'}): "
                             "load the file with pretrained=True, pretrained_cfg_overlay=dict(file=PATH), which reads "
                             "its metadata and converts it for timm's RGB input")
        try:
            report = load_state_dict_into(self, state_dict, fmt, meta, source="state_dict", strict=True)
        except IncompatibleWeightsError as err:
            r = err.report
            if strict or r.option_mismatches or r.shape_mismatch or r.bad_values:
                raise
            report = load_state_dict_into(self, state_dict, fmt, meta, source="state_dict", strict=False)
        return _IncompatibleKeys(report.missing, report.unexpected)


class TimmResNet(_TimmContract, ResNet):
    """Our ResNet / plain net under timm's contract (timm.models.resnet.ResNet's methods)."""

    def _last_map(self, x: torch.Tensor) -> torch.Tensor:
        return final_activation(x, self.final_norm)  # pre-activation nets: BN-ReLU, as timm's ResNetV2.norm

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.global_pool(x)
        if self.drop_rate:
            x = F.dropout(x, p=float(self.drop_rate), training=self.training)
        return x if pre_logits or self.fc is None else self.fc(x)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        pool = self.global_pool if global_pool is None else _pool(global_pool)
        if not pool.pool_type and num_classes > 0:  # checked before anything changes
            raise ValueError("global_pool='' leaves the maps unpooled: a classifier needs num_classes=0")
        self.global_pool, self.num_classes = pool, num_classes
        self.fc = self.new_classifier(self.num_features * pool.feat_mult(), num_classes)

    def group_matcher(self, coarse: bool = False) -> dict:
        return dict(stem=r"^stem", blocks=r"^res(\d+)" if coarse else r"^res(\d+)\.(\d+)")


class TimmVGG(_TimmContract, VGG):
    """Our VGG under timm's contract. The head is VGG's: pool5 to 7x7, fc6 / fc7 (timm's VGG: its pre_logits), the
    classifier; `global_pool` does not apply (fc6 reads the 7x7 map whole), so only timm's default is taken."""

    def _run_stage(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting():  # a stage at a time: its ReLUs are in place
            return torch.utils.checkpoint.checkpoint(getattr(self, name), x, use_reentrant=False)
        return getattr(self, name)(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.pre_logits(x)
        return x if pre_logits or self.fc is None else self.fc(x)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        _vgg_pool(global_pool)
        self.num_classes = num_classes
        self.fc = self.new_classifier(self.num_features, num_classes)

    def group_matcher(self, coarse: bool = False) -> dict:
        return dict(stem=r"^conv1\.conv1_1\.", blocks=r"^conv(\d+)\." if coarse else r"^conv(\d+)\.conv\d+_(\d+)")


def _vgg_pool(global_pool: str | None) -> None:
    if global_pool not in (None, "avg"):
        raise ValueError(f"global_pool={global_pool!r} does not apply to VGG: fc6 reads pool5's 7x7 map whole "
                         "(leave it unset)")


def _take_indices(n: int, indices: int | list[int] | None) -> list[int]:
    """timm's rule for `indices`: None all n stages, an int k the last k, a sequence those (negative from the end)."""
    if indices is None:
        return list(range(n))
    if isinstance(indices, int):
        if not 0 < indices <= n:
            raise ValueError(f"indices={indices}: the last k stages, k in 1..{n}")
        return list(range(n - indices, n))
    bad = [i for i in indices if not -n <= i < n]
    if bad or not indices:
        raise ValueError(f"indices={list(indices)}: stage indices in {-n}..{n - 1}")
    return sorted({i % n for i in indices})


_TIMM_CLASS = {ResNet: TimmResNet, VGG: TimmVGG}


def as_timm_model(model: FeatureNet, *, global_pool: str | None = None, drop_rate: float | None = None,
                  classifier_from_file: bool = False) -> nn.Module:
    """`model` (built by backbones.create_model, weights loaded or not) under timm's contract, in place.

    global_pool: timm's pooling before the classifier ('avg' default; 'max', 'avgmax', 'catavgmax', '' with
    num_classes 0) -- ResNets only. drop_rate: dropout before the classifier -- ResNets only (VGG's dropout after
    fc6 / fc7 is its builder's `dropout` option). classifier_from_file: the classifier holds a file's weights, so a
    pooling that changes its input is refused rather than replacing it with a fresh one."""
    cls = _TIMM_CLASS.get(type(model))
    if cls is None:
        raise TypeError(f"{type(model).__name__} has no timm contract here (known: "
                        f"{sorted(c.__name__ for c in _TIMM_CLASS)})")
    if cls is TimmVGG:
        _vgg_pool(global_pool)
        if drop_rate is not None:
            raise ValueError(f"drop_rate={drop_rate!r}: VGG's dropout (after fc6 and fc7) is its builder's "
                             "`dropout` option; build with dropout=")
    pool = _pool("avg" if global_pool is None else global_pool)
    changes_fc = cls is TimmResNet and (pool.feat_mult() != 1 or not pool.pool_type)
    if changes_fc and classifier_from_file and model.fc is not None:
        raise ValueError(f"global_pool={global_pool!r} changes the input of the file's classifier: pass "
                         "num_classes=N for a fresh one, or 0 for none")
    model.__class__ = cls
    model.num_classes = model.fc.out_features if model.fc is not None else 0
    if cls is TimmVGG:
        return model
    model.drop_rate = 0.0 if drop_rate is None else float(drop_rate)
    model.global_pool = pool
    if changes_fc:
        model.reset_classifier(model.num_classes)  # catavgmax doubles the classifier's input: a fresh one (as timm)
    return model


def _pool(pool_type: str) -> SelectAdaptivePool2d:
    """timm's pooling before the classifier; '' keeps the maps (N, C, H, W), as timm's global_pool=''."""
    return SelectAdaptivePool2d(pool_type=pool_type, flatten=bool(pool_type))
