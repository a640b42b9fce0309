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
torchvision's mean / std); loading a file replaces mean / std by the file's own, and a BGR 0-255 file (MSRA's,
Detectron2's zoo) is converted to timm's RGB [0, 1] input (backbones.input_convention). There are no published weights
to download: `pretrained=True` needs a file (any format backbones.load_pretrained reads safely), and loading is
strict. The model is one of ours under timm's model contract (backbones.timm_interface: forward_head, reset_classifier,
forward_intermediates, group_matcher, ...); timm options the paper's nets lack (drop_path_rate, a dilated
output_stride) are refused by name. `features_only=True` returns `TimmFeatures`, our own stage loop under timm's
features_only contract (a list of maps and a timm FeatureInfo that describes them), not a generic FX or hook wrapper.
`checkpoint_path=` goes through timm's loader, which keeps the tensors only: files whose channel order is BGR or
unknown are refused there and load through `pretrained_cfg_overlay=dict(file=PATH)` (TimmResNet.load_state_dict);
so should a file in our format converted from BGR weights, whose channel order only its metadata says.

Needs timm (the `timm` extra); importing this module registers the names (registering twice is harmless).
"""

from __future__ import annotations

from collections.abc import Sequence

import timm.models
import torch
from torch import nn

from .features import FeatureNet, run_stages
from .input_convention import create_model_for_rgb_unit_input
from .registry import create_model, list_models, model_info
from .timm_interface import as_timm_model
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
    # BGR 0-255 files (MSRA, Detectron2) converted exactly
    model, norm = create_model_for_rgb_unit_input(name, path, argument="file", num_classes=num_classes, **options)
    cfg.update(mean=norm.mean, std=norm.std)
    return model


# timm's creation options that the paper's nets have no counterpart for: one line each, never ignored
_NOT_APPLICABLE = {
    "drop_path_rate": "stochastic depth (drop_path_rate) is not part of the paper's nets",
    "drop_block_rate": "DropBlock (drop_block_rate) is not part of the paper's nets",
    "output_stride": "a dilated output_stride is not built here: the paper's nets are stride 32 (C4 and FPN use it so)",
}


def _timm_options(name: str, options: dict) -> tuple[str | None, float | None]:
    """(global_pool, drop_rate) taken out of `options`; timm options the nets lack refused by name."""
    for key, why in _NOT_APPLICABLE.items():
        value = options.pop(key, None)
        if value not in (None, 0, 0.0) and not (key == "output_stride" and value == 32):
            raise ValueError(f"{timm_name(name)}: {key}={value!r}: {why}; leave it unset")
    global_pool, drop_rate = options.pop("global_pool", None), options.pop("drop_rate", None)
    if drop_rate is not None and model_info(name).family == "vgg":
        if "dropout" in options:
            raise ValueError(f"{timm_name(name)}: drop_rate and dropout name the same dropout (after fc6 / fc7); "
                             "pass one")
        options["dropout"] = drop_rate  # VGG's dropout after fc6 / fc7 (timm's VGG: drop_rate there too)
        drop_rate = None
    return global_pool, drop_rate


def _entrypoint(name: str):
    def create(pretrained: bool = False, pretrained_cfg=None, pretrained_cfg_overlay: dict | None = None,
               cache_dir=None, *, features_only: bool = False, out_indices: Sequence[int] | None = None,
               num_classes: int | None = None, in_chans: int | None = None, **options) -> nn.Module:
        cfg = timm.models.resolve_pretrained_cfg(timm_name(name), pretrained_cfg=pretrained_cfg,
                                                 pretrained_cfg_overlay=pretrained_cfg_overlay).to_dict()
        if in_chans is not None:
            options["in_channels"] = in_chans  # timm's spelling of our builders' option (create_model checks it)
        global_pool, drop_rate = _timm_options(name, options)
        # num_classes None: the file's classifier (never a silently fresh one), else the registry's 1000
        model = _build(name, pretrained, cfg, 0 if features_only else num_classes, options)
        if features_only:
            model = TimmFeatures(model, out_indices)
            cfg = {k: v for k, v in cfg.items() if k not in ("num_classes", "classifier")}
        else:
            model = as_timm_model(model, global_pool=global_pool, drop_rate=drop_rate,
                                  classifier_from_file=pretrained and num_classes is None)
            cfg["num_classes"] = model.num_classes
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
