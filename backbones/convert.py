"""Convert any supported checkpoint into our format, inferring the architecture from the weights."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from .norm import BN_VARIANTS, GN_GROUPS
from .pretrained import LoadReport, load_state_dict_into, read_weights, save_pretrained
from .registry import create_model
from .resnet import IMAGENET_DEPTHS
from .vgg import VGG_DEPTHS
from .weight_formats import FormatError, WeightsMeta, convert_state_dict

__all__ = ["infer_model", "load_model", "convert_checkpoint"]


def _vgg_from_torchvision(sd: Mapping[str, Any]) -> tuple[str, dict]:
    convs = [k for k, v in sd.items() if k.startswith("features.") and k.endswith(".weight") and v.ndim == 4]
    has_bn = any(k.endswith("running_mean") for k in sd)
    for depth, per_stage in VGG_DEPTHS.items():
        if sum(per_stage) == len(convs):
            return f"vgg{depth}{'_bn' if has_bn else ''}", {}
    raise FormatError(f"a torchvision VGG with {len(convs)} convs matches no VGG depth")


def infer_model(sd: Mapping[str, Any], fmt: str, meta: WeightsMeta) -> tuple[str, dict]:
    """(model name, options) that weights fit, e.g. ("resnet101", {"stride_in_1x1": True})."""
    a = meta.arch
    if a.get("family") and a.get("depth"):  # our checkpoints say what they are
        width = {"width": a["width"]} if a.get("width", 1.0) != 1.0 else {}
        # GN's groups as recorded; a GN checkpoint from before they were had min(32, C): 32 (pretrained.py)
        width |= {"gn_groups": a.get("gn_groups", GN_GROUPS)} if a.get("norm") == "GN" else {}
        if a["family"] == "vgg":  # vgg16_bn: BN or a variant; another norm (GN) is an option of vgg16
            if a.get("norm") in BN_VARIANTS:
                return f"vgg{a['depth']}_bn", width
            return f"vgg{a['depth']}", ({"norm": a["norm"]} if a.get("norm") else {}) | width
        kind = {"resnet": ("resnet", "plain"), "cifar_resnet": ("cifar_resnet", "cifar_plain")}[a["family"]]
        name = f"{kind[0] if a.get('residual', True) else kind[1]}{a['depth']}"
        opts = {k: a[k] for k in ("stride_in_1x1", "preact", "shortcut") if a.get(k) not in (None, "none")}
        if a.get("norm") is not None and a["norm"] not in BN_VARIANTS:  # BN's variants share its tensors; GN does not
            opts["norm"] = a["norm"]
        return name, {**opts, **width}
    if fmt == "torchvision_vgg":
        return _vgg_from_torchvision(sd)
    converted, _, _ = convert_state_dict(sd, fmt, [])
    blocks: Counter = Counter()
    for key in converted:
        m = re.match(r"res(\d)\.(\d+)\.", key)
        if m:
            blocks[int(m[1])] = max(blocks[int(m[1])], int(m[2]) + 1)
    if not blocks:
        raise FormatError(f"cannot infer the architecture from keys {sorted(converted)[:5]}; "
                          "name the model explicitly")
    per_stage = tuple(blocks[i] for i in sorted(blocks))
    bottleneck = any(".conv3." in k for k in converted)
    residual = any(".shortcut." in k for k in converted)
    for depth, layout in IMAGENET_DEPTHS.items():
        if layout == per_stage and (depth >= 50) == bottleneck:
            opts = {"stride_in_1x1": meta.stride_in_1x1} if bottleneck and meta.stride_in_1x1 is not None else {}
            stem = converted.get("stem.conv1.weight")
            if stem is not None and stem.shape[0] != 64:  # a reduced-width net: the stem has 64 * width channels
                opts["width"] = stem.shape[0] / 64
            return f"{'resnet' if residual else 'plain'}{depth}", opts
    raise FormatError(f"blocks per stage {per_stage} (bottleneck={bottleneck}) match no ImageNet ResNet depth")


def _classes_in(sd: Mapping[str, Any], fmt: str) -> int:
    """The class count of the weights' classifier (0: none)."""
    fc = convert_state_dict(sd, fmt, [])[0].get("fc.weight")
    return int(fc.shape[0]) if fc is not None else 0


def load_model(path: str | os.PathLike, *, num_classes: int | None = None) -> tuple[str, dict, nn.Module]:
    """(model name, options, model) of a weights file: the architecture inferred from the file (ours say what
    they are), built and loaded strictly, in training mode as create_model returns it. num_classes: the classifier
    to build (None: the file's own; another count drops the file's classifier, e.g. to run a trained net's layers
    on another label set)."""
    sd, fmt, meta = read_weights(path)
    name, options = infer_model(sd, fmt, meta)
    own = _classes_in(sd, fmt)
    classes = own if num_classes is None else num_classes
    model = create_model(name, num_classes=classes, **options)
    load_state_dict_into(model, sd, fmt, meta, source=str(path), strict=True, drop_classifier=classes != own)
    return name, options, model


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, model_name: str | None = None,
                       options: dict | None = None, drop_classifier: bool = False) -> tuple[LoadReport, str, dict]:
    """Read `src` (any supported format) once, load it strictly into the inferred (or given) model, save as ours.

    Returns (report, model name, model options).
    """
    sd, fmt, meta = read_weights(src)
    if model_name is None:
        model_name, inferred = infer_model(sd, fmt, meta)
        options = {**inferred, **(options or {})}
    options = dict(options or {})
    model = create_model(model_name, num_classes=0 if drop_classifier else _classes_in(sd, fmt), **options)
    report = load_state_dict_into(model, sd, fmt, meta, source=str(src), strict=True,
                                  drop_classifier=drop_classifier)
    save_pretrained(model, Path(dst), input_format=meta.input_format, pixel_mean=meta.pixel_mean,
                    pixel_std=meta.pixel_std, extra={"converted_from": {"path": str(src), "format": fmt}})
    return report, model_name, options
