"""This project's backbones in timm's registry, for detectors that take their backbone from timm (effdet, many
mmdet/YOLO forks, segmentation_models_pytorch):

    import backbones.timm_models, timm
    timm.list_models("rdb_*")                          # every backbones.list_models() name, prefixed
    trunk = timm.create_model("rdb_plain34", features_only=True, out_indices=(2, 3, 4))
    trunk.feature_info.channels(), trunk.feature_info.reduction()   # [128, 256, 512], [8, 16, 32]
    net = timm.create_model("rdb_resnet50", pretrained=True, pretrained_cfg_overlay=dict(file="r50_tv.pth"))

PREFIX "rdb_" (resnet-detection-benchmark) keeps our nets apart from timm's own resnet50 / vgg16, which are other
networks (stride placement, stem, VGG's classifier). Each name's pretrained_cfg is derived from backbones.model_info
(input size, evaluation crop, first conv, classifier) and the input convention our pretraining saves (RGB,
torchvision's mean / std); loading a file replaces mean / std by the file's own. There are no published weights to
download: `pretrained=True` needs a file (any format backbones.load_pretrained reads safely), and loading is strict.
`features_only=True` returns `TimmFeatures`, our own stage loop under timm's features_only contract (a list of maps
and a timm FeatureInfo that describes them), not a generic FX or hook wrapper.

Needs timm (the `timm` extra); importing this module registers the names (registering twice is harmless).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import timm.models
import torch
from torch import nn

from .features import FeatureNet, run_stages
from .pretrained import create_model_with_weights
from .registry import create_model, list_models, model_info
from .weight_formats import TORCHVISION_MEAN, TORCHVISION_STD

__all__ = ["PREFIX", "TimmFeatures", "pretrained_cfg_of", "timm_name"]

PREFIX = "rdb_"


def timm_name(name: str) -> str:
    """timm's name of a registered backbone."""
    return PREFIX + name


def pretrained_cfg_of(name: str) -> dict:
    """timm's pretrained_cfg of backbones' `name`, from its registry metadata (one source of truth)."""
    info = model_info(name)
    return dict(
        url="", num_classes=1000, input_size=(3, info.input_size, info.input_size), pool_size=None,
        crop_pct=info.input_size / info.eval_resize if info.eval_resize else 1.0, crop_mode="center",
        interpolation="bilinear",  # classification.data.transforms' Resize (torchvision's default)
        mean=tuple(m / 255 for m in TORCHVISION_MEAN), std=tuple(s / 255 for s in TORCHVISION_STD),
        first_conv=info.first_conv, classifier=info.classifier, license="apache-2.0",
    )


class TimmFeatures(nn.Module):
    """timm's features_only contract on our stage API: `forward(x)` -> [the out_indices stages' maps], and
    `feature_info` a timm FeatureInfo whose channels / reductions are our FeatureInfo's channels / strides. The stage
    modules keep their names (state_dict keys are the backbone's); stages after the last wanted one and the head are
    not kept."""

    def __init__(self, model: FeatureNet, out_indices: Sequence[int] | None = None):
        super().__init__()
        names = model.stage_names
        wanted = tuple(range(len(names))) if out_indices is None else tuple(out_indices)
        bad = [i for i in wanted if not isinstance(i, int) or not -len(names) <= i < len(names)]
        if bad or not wanted:
            raise ValueError(f"out_indices {out_indices!r}: {type(model).__name__} has {len(names)} stages "
                             f"{names} (indices 0..{len(names) - 1})")
        wanted = tuple(sorted({i % len(names) for i in wanted}))
        for name in names[:wanted[-1] + 1]:
            self.add_module(name, getattr(model, name))
        self.out_names = [names[i] for i in wanted]
        self.arch = dict(getattr(model, "arch", {}))
        self.feature_info = timm.models.FeatureInfo(
            [dict(num_chs=f.channels, reduction=f.stride, module=f.name) for f in model.feature_info[:wanted[-1] + 1]],
            wanted)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [y for _, y in run_stages(self.named_children(), x, self.out_names)]


def _build(name: str, pretrained: bool, cfg: dict, num_classes: int | None, options: dict) -> nn.Module:
    if not pretrained:
        return create_model(name, num_classes=1000 if num_classes is None else num_classes, **options)
    path = cfg.get("file")
    if not path:
        raise ValueError(f"{timm_name(name)} has no published weights to download; pass the file: "
                         f"timm.create_model({timm_name(name)!r}, pretrained=True, "
                         "pretrained_cfg_overlay=dict(file=PATH))")
    model, report = create_model_with_weights(name, os.fspath(path), num_classes=num_classes, **options)
    meta = report.meta
    if meta.input_format == "BGR":
        raise ValueError(f"{path}: these weights expect BGR input ({meta.source_format}), timm's data pipeline "
                         "feeds RGB; use backbones.load_pretrained with a BGR pipeline instead")
    if meta.pixel_mean and meta.pixel_std:
        cfg.update(mean=tuple(m / 255 for m in meta.pixel_mean), std=tuple(s / 255 for s in meta.pixel_std))
    return model


def _entrypoint(name: str):
    def create(pretrained: bool = False, pretrained_cfg=None, pretrained_cfg_overlay: dict | None = None,
               cache_dir=None, *, features_only: bool = False, out_indices: Sequence[int] | None = None,
               num_classes: int | None = None, in_chans: int | None = None, **options) -> nn.Module:
        cfg = timm.models.resolve_pretrained_cfg(timm_name(name), pretrained_cfg=pretrained_cfg,
                                                 pretrained_cfg_overlay=pretrained_cfg_overlay).to_dict()
        if in_chans is not None:
            options["in_channels"] = in_chans  # timm's spelling of our builders' option (create_model checks it)
        # num_classes None: the file's classifier (never a silently fresh one), else the registry's 1000
        model = _build(name, pretrained, cfg, 0 if features_only else num_classes, options)
        if features_only:
            model = TimmFeatures(model, out_indices)
            cfg = {k: v for k, v in cfg.items() if k not in ("num_classes", "classifier")}
        model.pretrained_cfg = model.default_cfg = cfg
        return model

    create.__name__ = create.__qualname__ = timm_name(name)
    create.__module__ = __name__
    create.__doc__ = f"backbones' {name} (backbones.create_model) through timm.create_model."
    return create


def _register() -> None:
    for name in list_models():
        fn = _entrypoint(name)
        globals()[fn.__name__] = fn
        if not timm.models.is_model(fn.__name__):  # timm warns when a name is overwritten
            timm.models.register_model(fn)


default_cfgs = timm.models.generate_default_cfgs({timm_name(n): pretrained_cfg_of(n) for n in list_models()})
_register()
