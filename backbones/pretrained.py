"""Loading pretrained weights into our models (any supported format), and saving them in ours.

    report = load_pretrained(model, "R-101.pkl")          # strict: raises with a full report on any mismatch
    report = load_pretrained(model, path, drop_classifier=True, strict=False)
    print(report.summary())

Strict by default: missing keys, unexpected keys, shape mismatches and convention mismatches (e.g. weights
trained with the stride in the 3x3 conv loaded into a stride-in-1x1 model: same shapes, different function)
raise `IncompatibleWeightsError`. Nothing is executed from the file (see checkpoint_io).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .checkpoint_io import atomic_torch_save, read_checkpoint
from .norm import GN_GROUPS
from .registry import create_model, model_options
from .weight_formats import (
    KNOWN_META,
    TORCHVISION_MEAN,
    TORCHVISION_STD,
    FormatError,
    MetadataError,
    WeightsMeta,
    check_meta_dict,
    convert_state_dict,
    detect_format,
    is_detector_checkpoint,
    unwrap_checkpoint,
)

__all__ = ["LoadReport", "IncompatibleWeightsError", "load_pretrained", "load_state_dict_into", "save_pretrained",
           "create_model_with_weights",
           "read_weights", "read_weights_file", "WeightsFile", "meta_for_format", "WeightsMeta", "unusable_values",
           "weights_file_argument"]

CLASSIFIER_PREFIX = "fc."
# (stride_in_1x1 must match too, but is checked from WeightsMeta.stride_in_1x1, which every format sets, not arch)
_ARCH_KEYS_THAT_MUST_MATCH = ("family", "depth", "residual", "preact", "width", "gn_groups")
# Architecture keys added after checkpoints were first written: an older file without the key has this value.
_ARCH_DEFAULTS = {"width": 1.0}


@dataclass
class LoadReport:
    path: str
    source_format: str
    meta: WeightsMeta
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # in the model, not in the checkpoint
    unexpected: list[str] = field(default_factory=list)  # in the checkpoint, not in the model
    shape_mismatch: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # key, checkpoint, model
    skipped: list[str] = field(default_factory=list)  # detector-only / bookkeeping / dropped classifier
    option_mismatches: list[str] = field(default_factory=list)
    bad_values: list[str] = field(default_factory=list)  # inf/NaN, or integers where the model holds floats
    unwrapped: tuple[str, ...] = ()  # the wrappers the weights came out of ("the 'state_dict' entry", ...)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.shape_mismatch or self.option_mismatches
                    or self.bad_values)

    def summary(self, max_keys: int = 10) -> str:
        def keys(title: str, items: list) -> list[str]:
            if not items:
                return []
            shown = [f"    {k}" if isinstance(k, str) else f"    {k[0]}: checkpoint {k[1]} vs model {k[2]}"
                     for k in items[:max_keys]]
            more = [f"    ... and {len(items) - max_keys} more"] if len(items) > max_keys else []
            return [f"  {title} ({len(items)}):", *shown, *more]

        m = self.meta
        conv = ", ".join(f"{k}={v}" for k, v in (("input", m.input_format), ("mean", m.pixel_mean),
                                                   ("std", m.pixel_std), ("stride_in_1x1", m.stride_in_1x1))
                         if v is not None) or "conventions unknown"
        lines = [f"{self.path}: format {self.source_format} ({conv}); {len(self.loaded)} tensors fit the model"
                 + (f"; read out of {' and '.join(self.unwrapped)}" if self.unwrapped else "")]
        lines += keys("convention mismatch", self.option_mismatches)  # first: it often explains the rest
        lines += keys("missing in checkpoint", self.missing)
        lines += keys("unexpected in checkpoint", self.unexpected)
        lines += keys("shape mismatch", self.shape_mismatch)
        lines += keys("unusable values", self.bad_values)
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} keys a backbone does not have (detector heads, "
                         "BN counters, optimizer slots, dropped classifier)")
        return "\n".join(lines)


class IncompatibleWeightsError(RuntimeError):
    def __init__(self, report: LoadReport, hint: str = ""):
        self.report = report
        super().__init__("weights do not fit the model (nothing was loaded):\n" + report.summary(max_keys=20)
                         + (f"\n  hint: {hint}" if hint else ""))


def meta_for_format(fmt: str, container: Mapping[str, Any]) -> WeightsMeta:
    """What the weights expect (channel order, pixel statistics, stride placement), from format and container."""
    if fmt == "backbones":
        return WeightsMeta.from_dict(container.get("meta") or {})
    if fmt.startswith("torchvision"):
        return KNOWN_META["torchvision"]
    if fmt == "caffe2":
        return KNOWN_META["caffe2"]
    author = str(container.get("__author__", ""))
    if isinstance(container.get("meta"), Mapping):  # our detector checkpoints carry the backbone's meta
        return WeightsMeta.from_dict({**container["meta"], "source_format": "detectron2"})
    if author == "torchvision":  # detectron2/tools/convert-torchvision-to-d2.py
        return WeightsMeta("detectron2", **{k: getattr(KNOWN_META["torchvision"], k)
                                            for k in ("stride_in_1x1", "input_format", "pixel_mean", "pixel_std")})
    if "MSRA" in author or "Detectron" in author:  # model zoo: trained from the MSRA weights, BGR
        return WeightsMeta("detectron2", **{k: getattr(KNOWN_META["caffe2"], k)
                                            for k in ("stride_in_1x1", "input_format", "pixel_mean", "pixel_std")})
    return KNOWN_META["detectron2"]


@dataclass
class WeightsFile:
    """A weights file as read: its tensors (in the file's own names), container, format and what the weights expect
    of their inputs."""

    state_dict: dict[str, Any]
    container: dict[str, Any]
    source_format: str
    meta: WeightsMeta
    unwrapped: tuple[str, ...] = ()  # the wrappers the weights came out of (weight_formats.unwrap_checkpoint)

    @property
    def is_detector(self) -> bool:
        """A full detector checkpoint, rather than backbone weights (weight_formats.is_detector_checkpoint)."""
        return self.source_format != "caffe2" and is_detector_checkpoint(self.state_dict)


def read_weights_file(path: str | os.PathLike) -> WeightsFile:
    """Read a weights file safely (read_checkpoint: no pickled code runs): the project's one weights reader."""
    sd, container, unwrapped = unwrap_checkpoint(read_checkpoint(path), str(path))
    fmt = detect_format(sd, container)
    try:
        meta = meta_for_format(fmt, container)
    except MetadataError as err:
        raise MetadataError(f"{path}: {err}") from None
    return WeightsFile(sd, container, fmt, meta, unwrapped)


def read_weights(path: str | os.PathLike) -> tuple[dict[str, Any], str, WeightsMeta]:
    """(state_dict in the file's own names, format, metadata) of read_weights_file."""
    w = read_weights_file(path)
    return w.state_dict, w.source_format, w.meta


def _convention_mismatches(model: nn.Module, meta: WeightsMeta) -> list[str]:
    arch = getattr(model, "arch", {}) or {}
    out = []
    if meta.stride_in_1x1 is not None and arch.get("stride_in_1x1") is not None \
            and meta.stride_in_1x1 != arch["stride_in_1x1"]:
        out.append(f"stride_in_1x1: weights trained with {meta.stride_in_1x1} "
                   f"({'MSRA/Caffe' if meta.stride_in_1x1 else 'torchvision v1.5'} placement), model built with "
                   f"{arch['stride_in_1x1']}; same shapes, different network")
    theirs = {**_ARCH_DEFAULTS, **meta.arch} if meta.arch else {}
    if theirs.get("norm") == "GN":  # GN weights written before arch recorded groups: min(32, C), 32 at width 1
        theirs.setdefault("gn_groups", GN_GROUPS)
    for key in _ARCH_KEYS_THAT_MUST_MATCH:
        if key in theirs and key in arch and theirs[key] != arch[key]:
            out.append(f"{key}: weights are for {theirs[key]!r}, model is {arch[key]!r}")
    return out


def unusable_values(converted: Mapping[str, Any], model_sd: Mapping[str, torch.Tensor]) -> list[str]:
    """Tensors no model should be loaded with: inf/NaN, integers (e.g. an int8 safetensors) for float ones, or a
    norm's running variance below 0 (a frozen BN divides by its square root: NaN outputs, "AP 0.00", no error)."""
    bad = []
    for k, v in converted.items():
        if k not in model_sd or not model_sd[k].is_floating_point():
            continue
        t = torch.from_numpy(np.asarray(v)) if isinstance(v, np.ndarray) else v
        if not torch.is_tensor(t):
            continue
        if not t.is_floating_point():
            bad.append(f"{k}: {t.dtype} values for a {model_sd[k].dtype} parameter")
        elif not torch.isfinite(t).all():
            bad.append(f"{k}: {int((~torch.isfinite(t)).sum())} of {t.numel()} values are inf/NaN")
        elif k.endswith("running_var") and (t < 0).any():
            bad.append(f"{k}: {int((t < 0).sum())} of {t.numel()} values are negative (a variance)")
    return bad


def _to_tensor(value: Any, like: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value
    return t.detach().to(dtype=like.dtype, device=like.device)


def load_pretrained(model: nn.Module, path: str | os.PathLike, *, strict: bool = True,
                    drop_classifier: bool = False, verbose: bool = False) -> LoadReport:
    """Load torchvision / timm / Detectron2 (.pth, .pkl) / MSRA Caffe2 / our weights into `model`.

    strict: raise IncompatibleWeightsError (loading nothing) on missing / unexpected keys, shape mismatches or
        convention mismatches; False loads every tensor whose name and shape fit and reports the rest.
    drop_classifier: ignore the classifier (`fc.*`) on both sides, e.g. ImageNet weights into a 10-class model.
    """
    w = read_weights_file(path)
    report = load_state_dict_into(model, w.state_dict, w.source_format, w.meta, source=str(path), strict=strict,
                                  drop_classifier=drop_classifier)
    report.unwrapped = w.unwrapped
    if verbose:
        print(report.summary())
    return report


def load_state_dict_into(model: nn.Module, sd: Mapping[str, Any], fmt: str, meta: WeightsMeta, *, source: str,
                         strict: bool = True, drop_classifier: bool = False) -> LoadReport:
    """`load_pretrained` for weights already read by `read_weights`."""
    model_sd = model.state_dict()
    try:
        converted, skipped, unmatched = convert_state_dict(sd, fmt, list(model_sd))
    except FormatError as err:
        raise FormatError(f"{source}: {err}") from None
    if drop_classifier:
        skipped += [k for k in converted if k.startswith(CLASSIFIER_PREFIX)]
        converted = {k: v for k, v in converted.items() if not k.startswith(CLASSIFIER_PREFIX)}

    def optional(k: str) -> bool:
        return k.endswith("num_batches_tracked") or (drop_classifier and k.startswith(CLASSIFIER_PREFIX))

    # BN step counters: loaded where both sides have them, ignored where only one does (FrozenBN has none).
    counters = [k for k in converted if k.endswith("num_batches_tracked") and k not in model_sd]
    skipped += counters
    converted = {k: v for k, v in converted.items() if k not in set(counters)}
    report = LoadReport(path=source, source_format=fmt, meta=meta, skipped=skipped)
    report.missing = [k for k in model_sd if k not in converted and not optional(k)]
    report.unexpected = unmatched + [k for k in converted if k not in model_sd]
    report.shape_mismatch = [(k, tuple(v.shape), tuple(model_sd[k].shape)) for k, v in converted.items()
                             if k in model_sd and tuple(v.shape) != tuple(model_sd[k].shape)]
    report.option_mismatches = _convention_mismatches(model, meta)
    bad_shapes = {k for k, _, _ in report.shape_mismatch}
    report.bad_values = unusable_values(converted, model_sd)
    unusable = bad_shapes | {b.split(": ", 1)[0] for b in report.bad_values}  # never loaded, strict or not
    report.loaded = [k for k in converted if k in model_sd and k not in unusable]
    if strict and not report.ok:
        # each hint in the three spellings a user may be using: Python, the tools' --model-option, Detectron2's key
        hint = ""
        structural = [k for k in report.missing + report.unexpected if not k.startswith(CLASSIFIER_PREFIX)]
        if any(m.startswith("width:") for m in report.option_mismatches):
            w = meta.arch.get("width", 1.0)
            hint = (f"build the model with width={w} (tools: --model-option width={w}; Detectron2 plugin: "
                    f"MODEL.BACKBONES.WIDTH {w})")
        elif structural:  # other blocks or layers: another depth or family; stride placement changes no key
            hint = (f"{len(structural)} tensors are missing or unexpected: the weights are of another depth or "
                    "family than the model (tools/convert_weights.py without --model infers it from the weights)")
        elif any(k.startswith(CLASSIFIER_PREFIX) for k, _, _ in report.shape_mismatch):
            hint = ("the classifier has a different number of classes: drop it (drop_classifier=True; "
                    "tools/convert_weights.py --drop-classifier)")
        elif any(m.startswith("gn_groups:") for m in report.option_mismatches):
            g = meta.arch.get("gn_groups", GN_GROUPS)
            hint = (f"build the model with gn_groups={g} (tools: --model-option gn_groups={g}; Detectron2 plugin: "
                    f"MODEL.BACKBONES.GN_GROUPS {g})")
        elif any(m.startswith("stride_in_1x1:") for m in report.option_mismatches):
            hint = (f"build the model with stride_in_1x1={meta.stride_in_1x1} (tools: --model-option "
                    f"stride_in_1x1={meta.stride_in_1x1}; Detectron2 plugin: MODEL.BACKBONES.STRIDE_IN_1X1 "
                    f"{meta.stride_in_1x1})")
        raise IncompatibleWeightsError(report, hint)
    new_sd = dict(model_sd)
    for k in report.loaded:
        new_sd[k] = _to_tensor(converted[k], model_sd[k])
    model.load_state_dict(new_sd)
    return report


# torchvision's weights enum names ("DEFAULT", "IMAGENET1K_V1", "IMAGENET1K_SWAG_E2E_V1", "COCO_V1") and their
# qualified spelling ("ResNet50_Weights.IMAGENET1K_V1"), which torchvision's builders also take as strings
_TORCHVISION_WEIGHTS_NAME = re.compile(r"(?:\w+_Weights\.)?(?:DEFAULT|[A-Z0-9_]+_V\d+)")


def weights_file_argument(name: str, weights: Any, *, argument: str = "weights") -> str | os.PathLike:
    """`weights` as the path of a file, or one line saying why not: here weights are files (nothing is downloaded),
    so torchvision's spellings -- a weights enum (ResNet50_Weights.IMAGENET1K_V1), its name ("IMAGENET1K_V1",
    "DEFAULT") or pretrained=True -- are answered with how to pass the file they stand for."""
    if isinstance(weights, os.PathLike) or (isinstance(weights, str) and (
            Path(weights).exists() or not _TORCHVISION_WEIGHTS_NAME.fullmatch(weights))):
        return weights  # a path: read (and refused if absent) by the loader, which names it
    enum_name = getattr(weights, "name", weights)
    if isinstance(enum_name, str):
        enum_name = enum_name.rsplit(".", 1)[-1]  # "ResNet50_Weights.IMAGENET1K_V1" -> IMAGENET1K_V1
    url = getattr(weights, "url", None)
    if url is None and isinstance(enum_name, str):
        try:  # torchvision's file for that name, when torchvision has weights of the same net
            import torchvision.models
            url = torchvision.models.get_model_weights(name)[enum_name].url
        except (KeyError, ValueError, AttributeError):
            url = None
    if not isinstance(enum_name, str):
        raise TypeError(f"{argument}={weights!r}: expected the path of a weights file")
    where = (f" (torchvision's {url.rsplit('/', 1)[-1]}, in ~/.cache/torch/hub/checkpoints/ once torchvision has "
             "downloaded it)") if url else ""
    raise ValueError(f"{argument}={enum_name!r} names torchvision weights; here weights are files, nothing is "
                     f"downloaded: pass the path of the file{where} -- torchvision, timm, Detectron2 .pkl, MSRA "
                     "Caffe2 or ours")


def create_model_with_weights(name: str, path: str | os.PathLike, *, num_classes: int | None = None,
                              **options) -> tuple[nn.Module, LoadReport]:
    """Build the registered `name` and load the weights file `path` into it, strictly: what torch.hub and timm
    callers get (hubconf.py, backbones.timm_models). Two things are taken from the file because such a caller cannot
    know them: the stride placement the weights were trained with (unless `options` set stride_in_1x1), and whether
    its classifier fits -- num_classes None (default) takes the file's classifier as it is (none: no classifier,
    never a silently fresh one); a number that differs from the file's, or 0, drops it (the model's is fresh, as
    asked). Anything else that does not fit raises IncompatibleWeightsError naming the keys; nothing is loaded."""
    w = read_weights_file(path)
    if ("stride_in_1x1" in model_options(name) and "stride_in_1x1" not in options
            and w.meta.stride_in_1x1 is not None):
        options = {**options, "stride_in_1x1": w.meta.stride_in_1x1}
    probe = create_model(name, num_classes=1, **options)  # the file's names in the model's terms, for its classifier
    converted, _, _ = convert_state_dict(w.state_dict, w.source_format, list(probe.state_dict()))
    theirs = converted.get(CLASSIFIER_PREFIX + "weight")
    if num_classes is None:
        num_classes = int(theirs.shape[0]) if hasattr(theirs, "shape") else 0
    model = create_model(name, num_classes=num_classes, **options)
    keep_classifier = num_classes > 0 and getattr(theirs, "shape", (None,))[0] == num_classes
    report = load_state_dict_into(model, w.state_dict, w.source_format, w.meta, source=str(path), strict=True,
                                  drop_classifier=not keep_classifier)
    return model, report


def save_pretrained(model: nn.Module, path: str | os.PathLike, *, input_format: str | None = "RGB",
                    pixel_mean: tuple[float, ...] | None = TORCHVISION_MEAN,
                    pixel_std: tuple[float, ...] | None = TORCHVISION_STD,
                    extra: Mapping[str, Any] | None = None, top1: float | None = None) -> Path:
    """Write `model` in our format: {"model": state_dict, "meta": {...}} (plus `extra`), atomically; top1: the
    classifier's top-1 accuracy (%) to publish with the weights (the main job's leaderboard reads it).

    The metadata (architecture, stride placement, channel order, pixel mean/std in 0-255 units) travels with the
    weights so a detector can normalize its inputs the way the backbone was trained. None = unknown
    (e.g. converted from a Detectron2 checkpoint that does not say).
    """
    arch = dict(getattr(model, "arch", {}) or {})
    meta = WeightsMeta("backbones", stride_in_1x1=arch.get("stride_in_1x1"), input_format=input_format,
                       pixel_mean=tuple(pixel_mean) if pixel_mean else None,
                       pixel_std=tuple(pixel_std) if pixel_std else None, arch=arch, top1=top1).to_dict()
    check_meta_dict(meta)
    meta["format"] = "backbones"
    obj = {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "meta": meta, **(extra or {})}
    atomic_torch_save(obj, path)
    return Path(path)
