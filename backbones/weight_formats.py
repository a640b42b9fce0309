"""Checkpoint formats we read, how to recognise them, and the explicit key-renaming rules into our names.

Our names (Detectron2's layout): `stem.conv1.weight`, `stem.conv1.norm.*`, `res2.0.conv1.weight`,
`res2.0.conv1.norm.*`, `res2.0.shortcut.weight`, `res2.0.shortcut.norm.*`, `fc.*`; VGG `conv1.conv1_1.weight`,
`conv1.conv1_1.norm.*` (bn variants), `fc6.*`, `fc7.*`, `fc.*`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["WeightsMeta", "KNOWN_META", "unwrap_checkpoint", "detect_format", "convert_state_dict",
           "FormatError", "MetadataError", "TORCHVISION_MEAN", "TORCHVISION_STD", "DETECTRON2_BGR_MEAN"]

# Pixel statistics in 0-255 units, as Detectron2's PIXEL_MEAN / PIXEL_STD.
TORCHVISION_MEAN = (123.675, 116.28, 103.53)  # RGB; = (0.485, 0.456, 0.406) * 255
TORCHVISION_STD = (58.395, 57.12, 57.375)  # RGB; = (0.229, 0.224, 0.225) * 255
# What Detectron2 feeds MSRA's converted R-*.pkl (its default PIXEL_MEAN, std 1: they absorb the std into conv1):
# torchvision's mean in BGR order, not a mean MSRA published (no reference file states MSRA's own; FIDELITY.md,
# "pixel mean"), hence the name.
DETECTRON2_BGR_MEAN = tuple(reversed(TORCHVISION_MEAN))  # (103.53, 116.28, 123.675)


class FormatError(ValueError):
    """The checkpoint's keys match no supported format."""


class MetadataError(ValueError):
    """A checkpoint's "meta" holds a value no reader can use (it would set INPUT.FORMAT or PIXEL_MEAN to it)."""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_meta_dict(d: Any) -> None:
    """MetadataError naming the key if a checkpoint's "meta" is not what save_pretrained writes: input_format
    RGB/BGR, three finite pixel statistics (std > 0), a boolean stride_in_1x1, arch a mapping with a positive
    finite width and an integer depth, top1 a percentage. Missing entries are fine (None = unknown)."""
    if not isinstance(d, Mapping):
        raise MetadataError(f"meta is a {type(d).__name__}, not a mapping")
    if d.get("input_format") not in (None, "RGB", "BGR"):
        raise MetadataError(f"meta.input_format {d['input_format']!r}: expected 'RGB' or 'BGR'")
    for key in ("pixel_mean", "pixel_std"):
        v = d.get(key)
        if v is None:
            continue
        if not (isinstance(v, (list, tuple)) and len(v) == 3 and all(_number(x) for x in v)):
            raise MetadataError(f"meta.{key} {v!r}: expected three finite numbers (0-255 units, one per channel)")
        if key == "pixel_std" and min(v) <= 0:
            raise MetadataError(f"meta.pixel_std {list(v)}: every channel's std must be > 0")
    top1 = d.get("top1")
    if top1 is not None and not (_number(top1) and 0 <= top1 <= 100):
        raise MetadataError(f"meta.top1 {top1!r}: expected a top-1 accuracy in percent, 0 to 100")
    if d.get("stride_in_1x1") not in (None, True, False):
        raise MetadataError(f"meta.stride_in_1x1 {d['stride_in_1x1']!r}: expected true, false or null")
    arch = d.get("arch") or {}
    if not isinstance(arch, Mapping):
        raise MetadataError(f"meta.arch is a {type(arch).__name__}, not a mapping")
    if "width" in arch and not (_number(arch["width"]) and arch["width"] > 0):
        raise MetadataError(f"meta.arch.width {arch['width']!r}: expected a positive number")
    for key in ("depth", "gn_groups"):
        if key in arch and not (isinstance(arch[key], int) and not isinstance(arch[key], bool) and arch[key] > 0):
            raise MetadataError(f"meta.arch.{key} {arch[key]!r}: expected a positive integer")


@dataclass
class WeightsMeta:
    """What a set of weights expects of its inputs and architecture. None = unknown."""

    source_format: str
    stride_in_1x1: bool | None = None  # bottleneck stride placement the weights were trained with
    input_format: str | None = None  # "RGB" or "BGR"
    pixel_mean: tuple[float, ...] | None = None  # 0-255 units
    pixel_std: tuple[float, ...] | None = None
    arch: dict = field(default_factory=dict)  # producer's model.arch when known (our checkpoints)
    top1: float | None = None  # the top-1 accuracy (%) the producer states for the weights' classifier

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pixel_mean"] = list(self.pixel_mean) if self.pixel_mean else None
        d["pixel_std"] = list(self.pixel_std) if self.pixel_std else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WeightsMeta:
        check_meta_dict(d)
        known = {k: d[k] for k in ("source_format", "stride_in_1x1", "input_format", "pixel_mean", "pixel_std",
                                   "arch", "top1") if k in d}
        meta = cls(**{"source_format": "backbones", **known})
        meta.pixel_mean = tuple(meta.pixel_mean) if meta.pixel_mean else None
        meta.pixel_std = tuple(meta.pixel_std) if meta.pixel_std else None
        meta.arch = dict(meta.arch or {})
        return meta


KNOWN_META = {
    # torchvision and timm ImageNet weights: RGB, [0,1] inputs normalised by ImageNet mean/std, stride in 3x3.
    "torchvision": WeightsMeta("torchvision", stride_in_1x1=False, input_format="RGB",
                               pixel_mean=TORCHVISION_MEAN, pixel_std=TORCHVISION_STD),
    # MSRA's original release, via Detectron/Caffe2 (R-50.pkl, R-101.pkl): BGR, mean only, stride in 1x1.
    "caffe2": WeightsMeta("caffe2", stride_in_1x1=True, input_format="BGR", pixel_mean=DETECTRON2_BGR_MEAN,
                          pixel_std=(1.0, 1.0, 1.0)),
    "detectron2": WeightsMeta("detectron2"),  # depends on how it was trained; the file rarely says
}

# Keys a backbone never has: detector heads, FPN, pixel statistics of Detectron2 models, optimizer slots.
_DETECTOR_ONLY = re.compile(
    r"^(proposal_generator\.|roi_heads\.box_predictor\.|roi_heads\.(mask|keypoint)_head\.|backbone\.fpn_|"
    r"pixel_(mean|std)$|sem_seg_head\.)|_momentum$"
)


def unwrap_checkpoint(obj: Any, source: str) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """Return (state_dict, container, what was unwrapped) from the usual wrappers: {"model": sd} (Detectron2, ours),
    {"state_dict": sd} (timm/lightning, and training scripts beside their epoch and best accuracy), {"blobs": sd}
    (Caffe2), or a bare state dict; keys that all start with DataParallel's / DistributedDataParallel's "module."
    lose it (as timm's clean_state_dict does), a mixed file keeps its names."""
    if not isinstance(obj, Mapping):
        raise FormatError(f"{source}: expected a dict of weights, found {type(obj).__name__}")
    container, unwrapped = dict(obj), []
    for key in ("model", "state_dict", "blobs", "model_state"):
        if key in obj and isinstance(obj[key], Mapping):
            sd = obj[key]
            unwrapped.append(f"the {key!r} entry")
            break
    else:
        sd = obj
    if sd and all(isinstance(k, str) and k.startswith(DDP_PREFIX) for k in sd):
        sd = {k[len(DDP_PREFIX):]: v for k, v in sd.items()}
        unwrapped.append(f"the {DDP_PREFIX!r} prefix of (Distributed)DataParallel")
    bad = [k for k, v in sd.items() if not isinstance(v, (torch.Tensor, np.ndarray))]
    if bad:
        raise FormatError(f"{source}: entries that are not arrays: {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    if not sd:
        raise FormatError(f"{source}: the checkpoint holds no weights")
    return dict(sd), container, tuple(unwrapped)


DDP_PREFIX = "module."


# Key prefixes of a Detectron2 detector's state dict (trunk, RPN, RoI heads): the one definition of "this file is a
# detector checkpoint" (MSRA's Caffe2 blobs excepted: their names never start so).
DETECTOR_KEY_PREFIXES = ("backbone.", "proposal_generator.", "roi_heads.")


def is_detector_checkpoint(sd: Mapping[str, Any]) -> bool:
    """A full detector checkpoint (keys named like a Detectron2 detector's), rather than backbone weights."""
    return any(k.startswith(DETECTOR_KEY_PREFIXES) for k in sd)


def detect_format(sd: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """One of: backbones, torchvision_resnet, torchvision_vgg, detectron2, caffe2."""
    meta = container.get("meta")
    if isinstance(meta, Mapping) and meta.get("format") == "backbones":
        return "backbones"
    keys = set(sd)
    if "blobs" in container or "conv1_w" in keys or any(re.match(r"res\d+_\d+_branch", k) for k in keys):
        return "caffe2"
    if "features.0.weight" in keys and any(k.startswith("classifier.") for k in keys):
        return "torchvision_vgg"
    if "conv1.weight" in keys and "bn1.weight" in keys:
        return "torchvision_resnet"  # also timm's resnet*: the same names
    detector = is_detector_checkpoint(keys)
    if not detector and "fc.weight" in keys and any(re.match(r"(stem|res\d)\.", k) for k in keys):
        return "backbones"  # a plain state_dict of ours: Detectron2's classifier is `linear` (or `stem.fc`)
    if detector or any(re.match(r"(stem\.(conv1|fc)|linear)\.", k) for k in keys):
        if "conv1.conv1_1.weight" not in keys:
            return "detectron2"
    if any(re.match(r"(stem|res\d|conv\d)\.", k) for k in keys):
        return "backbones"
    raise FormatError(f"unrecognised checkpoint layout; first keys: {sorted(keys)[:6]}")


def _rename(sd: Mapping[str, Any], rules: list[tuple[str, str]]) -> tuple[dict[str, Any], list[str]]:
    """Apply the first matching (regex, replacement) rule to each key; keys no rule matches are returned apart.
    FormatError naming both keys when two map to one parameter (`backbone.res2.*` beside `res2.*`): the last one
    silently won, and which of the two the file means cannot be known."""
    out, unmatched, source = {}, [], {}
    compiled = [(re.compile(p), r) for p, r in rules]
    for key, value in sd.items():
        for pat, repl in compiled:
            m = pat.fullmatch(key)
            if m:
                target = repl(m) if callable(repl) else m.expand(repl)
                if target in out:
                    raise FormatError(f"keys {source[target]!r} and {key!r} both map to {target!r}: the file holds "
                                      "that parameter twice")
                out[target], source[target] = value, key
                break
        else:
            unmatched.append(key)
    return out, unmatched


_NORM = r"(weight|bias|running_mean|running_var|num_batches_tracked)"

TORCHVISION_RESNET_RULES = [
    (r"conv1\.weight", "stem.conv1.weight"),
    (rf"bn1\.{_NORM}", r"stem.conv1.norm.\1"),
    (r"layer(\d)\.(\d+)\.conv(\d)\.weight", lambda m: f"res{int(m[1]) + 1}.{m[2]}.conv{m[3]}.weight"),
    (rf"layer(\d)\.(\d+)\.bn(\d)\.{_NORM}", lambda m: f"res{int(m[1]) + 1}.{m[2]}.conv{m[3]}.norm.{m[4]}"),
    (r"layer(\d)\.(\d+)\.downsample\.0\.weight", lambda m: f"res{int(m[1]) + 1}.{m[2]}.shortcut.weight"),
    (rf"layer(\d)\.(\d+)\.downsample\.1\.{_NORM}", lambda m: f"res{int(m[1]) + 1}.{m[2]}.shortcut.norm.{m[3]}"),
    (r"fc\.(weight|bias)", r"fc.\1"),
]

DETECTRON2_RULES = [  # first match wins
    (r"stem\.fc\.(weight|bias)", r"fc.\1"),  # detectron2's convert-torchvision-to-d2.py puts fc under stem.
    (r"backbone\.bottom_up\.(stem|res\d)\.(.*)", r"\1.\2"),  # FPN models
    (r"backbone\.(stem|res\d|conv\d)\.(.*)", r"\1.\2"),  # C4 models (and our VGG detector)
    (r"roi_heads\.(res5)\.(.*)", r"\1.\2"),  # C4 per-RoI head (Res5ROIHeads and ours)
    (r"roi_heads\.box_head\.(fc6|fc7)\.(.*)", r"\1.\2"),  # our VGG-16 RoI head
    (r"(stem|res\d)\.(.*)", r"\1.\2"),  # classification-layout D2 checkpoints
    (r"linear\.(weight|bias)", r"fc.\1"),  # detectron2's ResNet classifier
]

_C2_NORM = {"s": "weight", "gamma": "weight", "b": "bias", "beta": "bias", "rm": "running_mean",
            "running_mean": "running_mean", "riv": "running_var", "running_var": "running_var"}
_C2_NORM_RE = "(s|gamma|b|beta|rm|running_mean|riv|running_var)"
_C2_BRANCH = {"a": 1, "b": 2, "c": 3}

CAFFE2_RULES = [
    (r"conv1_w", "stem.conv1.weight"),
    (r"conv1_b", "stem.conv1.bias"),  # MSRA's ResNet-50 conv1 has a bias; folded into its BN below
    (rf"res_conv1_bn_{_C2_NORM_RE}", lambda m: f"stem.conv1.norm.{_C2_NORM[m[1]]}"),
    (r"res(\d)_(\d+)_branch1_w", r"res\1.\2.shortcut.weight"),
    (rf"res(\d)_(\d+)_branch1_bn_{_C2_NORM_RE}", lambda m: f"res{m[1]}.{m[2]}.shortcut.norm.{_C2_NORM[m[3]]}"),
    (r"res(\d)_(\d+)_branch2([abc])_w", lambda m: f"res{m[1]}.{m[2]}.conv{_C2_BRANCH[m[3]]}.weight"),
    (rf"res(\d)_(\d+)_branch2([abc])_bn_{_C2_NORM_RE}",
     lambda m: f"res{m[1]}.{m[2]}.conv{_C2_BRANCH[m[3]]}.norm.{_C2_NORM[m[4]]}"),
    (r"(?:fc1000|pred)_w", "fc.weight"),
    (r"(?:fc1000|pred)_b", "fc.bias"),
]


def _vgg_rules(model_keys: list[str]) -> list[tuple[str, str]]:
    """torchvision's `features.<i>` indices, derived from the order of our VGG layers (pool, conv, [bn], relu)."""
    rules, idx = [], 0
    layer_names = []
    for key in model_keys:  # state-dict order is module order
        m = re.fullmatch(r"(conv\d\.conv\d_\d)\.(weight|bias|norm\.\w+)", key)
        if m and m[1] not in layer_names:
            layer_names.append(m[1])
    has_bn = any(k.endswith("norm.running_mean") for k in model_keys)
    prev_stage = None
    for name in layer_names:
        stage = name.split(".")[0]
        if prev_stage is not None and stage != prev_stage:
            idx += 1  # the max pool between stages
        prev_stage = stage
        rules.append((rf"features\.{idx}\.(weight|bias)", rf"{name}.\1"))
        idx += 1
        if has_bn:
            rules.append((rf"features\.{idx}\.{_NORM}", rf"{name}.norm.\1"))
            idx += 1
        idx += 1  # ReLU
    rules += [(r"classifier\.0\.(weight|bias)", r"fc6.\1"), (r"classifier\.3\.(weight|bias)", r"fc7.\1"),
              (r"classifier\.6\.(weight|bias)", r"fc.\1")]
    return rules


def _unfold_caffe2_bn(sd: dict[str, Any], eps: float = 1e-5) -> dict[str, Any]:
    """MSRA's released BN is folded into an affine (`_bn_s`, `_bn_b`) with no statistics: give it mean 0 and
    var 1 - eps so that y = s * x + b exactly in our BN/FrozenBN (eps = 1e-5)."""
    out = dict(sd)
    for key in sd:
        if key.endswith("norm.weight"):
            base = key[: -len("weight")]
            if base + "running_mean" not in sd and base + "running_var" not in sd:
                w = torch.as_tensor(np.asarray(sd[key])) if isinstance(sd[key], np.ndarray) else sd[key]
                out[base + "running_mean"] = torch.zeros_like(w, dtype=torch.float32)
                out[base + "running_var"] = torch.full_like(w, 1.0 - eps, dtype=torch.float32)
    return out


def _fold_stem_bias(sd: dict[str, Any]) -> dict[str, Any]:
    """BN(Wx + c) == BN'(Wx) with running_mean' = running_mean - c: exact, and our conv1 has no bias."""
    if "stem.conv1.bias" not in sd or "stem.conv1.norm.running_mean" not in sd:
        return sd
    out = dict(sd)
    c = torch.as_tensor(np.asarray(out.pop("stem.conv1.bias")), dtype=torch.float32)
    out["stem.conv1.norm.running_mean"] = torch.as_tensor(np.asarray(sd["stem.conv1.norm.running_mean"]),
                                                          dtype=torch.float32) - c
    return out


def convert_state_dict(sd: Mapping[str, Any], fmt: str, model_keys: list[str]
                       ) -> tuple[dict[str, Any], list[str], list[str]]:
    """Rename `sd` (format `fmt`) into our names. Returns (converted, skipped, unmatched):
    skipped = detector-only or bookkeeping keys a backbone never has; unmatched = keys no rule explains."""
    skipped = [k for k in sd if _DETECTOR_ONLY.search(k)]
    sd = {k: v for k, v in sd.items() if k not in set(skipped)}
    if fmt == "backbones":
        return dict(sd), skipped, []
    rules = {"torchvision_resnet": TORCHVISION_RESNET_RULES, "detectron2": DETECTRON2_RULES,
             "caffe2": CAFFE2_RULES}.get(fmt)
    if fmt == "torchvision_vgg":
        rules = _vgg_rules(model_keys)
    if rules is None:
        raise FormatError(f"no conversion rules for format {fmt!r}")
    converted, unmatched = _rename(sd, rules)
    if fmt == "caffe2":
        converted = _fold_stem_bias(_unfold_caffe2_bn(converted))
    return converted, skipped, unmatched
