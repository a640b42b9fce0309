"""Detectron2 checkpointing that reads files safely and loads pretrained backbones through `backbones`.

`BackbonesCheckpointer` is Detectron2's DetectionCheckpointer with one change, in `_load_file`:
- every file is read without executing code (torch weights_only / restricted unpickler), including `.pkl`;
- a full detector checkpoint (ours or Detectron2's: keys already named like the model's) loads as usual;
- anything else is treated as *backbone* weights in any format `backbones.load_pretrained` reads (torchvision,
  timm, Detectron2 classification `.pkl`, MSRA Caffe2 blobs, our classification checkpoints): they are loaded
  into a fresh copy of the detector's `backbones` model (strictly, classifier dropped), then renamed to where
  the detector keeps each stage (`backbone.`, `backbone.bottom_up.`, `roi_heads.`, `roi_heads.box_head.`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from detectron2.checkpoint import DetectionCheckpointer
from torch import nn

from backbones.checkpoint_io import atomic_torch_save, read_checkpoint
from backbones.pretrained import load_state_dict_into, meta_for_format
from backbones.weight_formats import WeightsMeta, detect_format, unwrap_checkpoint

from .modeling.backbone import BackboneSpec, BackbonesTrunk

__all__ = ["BackbonesCheckpointer", "read_backbone_weights", "BackboneWeights", "DETECTOR_PREFIXES"]

logger = logging.getLogger(__name__)

# Where a detector built by this plugin keeps the stages of its `backbones` model, tried in this order.
DETECTOR_PREFIXES = ("backbone.bottom_up.", "backbone.", "roi_heads.", "roi_heads.box_head.")
# Keys only a detector checkpoint has; any of them marks a file as a full detector checkpoint.
_DETECTOR_MARKERS = ("proposal_generator.", "roi_heads.box_predictor.", "backbone.")


@dataclass
class BackboneWeights:
    state_dict: dict[str, Any]
    source_format: str
    meta: WeightsMeta
    container: dict[str, Any]


_cache: dict[tuple, tuple[dict, dict, BackboneWeights | None]] = {}


def _read_cached(path: str) -> tuple[dict, dict, BackboneWeights | None]:
    """(state dict, container, backbone weights or None for a detector checkpoint), cached for the last file so
    the config step (pixel statistics) and the model load read it once."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _cache:
        _cache.clear()
        sd, container = unwrap_checkpoint(read_checkpoint(path), path)
        fmt = detect_format(sd, container)
        if fmt != "caffe2" and any(k.startswith(_DETECTOR_MARKERS) for k in sd):
            _cache[key] = (sd, container, None)
        else:
            _cache[key] = (sd, container, BackboneWeights(sd, fmt, meta_for_format(fmt, container), container))
    return _cache[key]


def read_backbone_weights(path: str) -> BackboneWeights | None:
    """Backbone weights in `path`, or None if it is a full detector checkpoint."""
    return _read_cached(path)[2]


def _find_trunk(model: nn.Module) -> BackbonesTrunk | None:
    for m in model.modules():
        if isinstance(m, BackbonesTrunk):
            return m
    return None


def _tensors(sd: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v for k, v in sd.items()}


class BackbonesCheckpointer(DetectionCheckpointer):
    """DetectionCheckpointer + safe reading + pretrained backbones in any supported format. Writes atomically."""

    def _load_file(self, filename: str) -> dict[str, Any]:
        sd, container, weights = _read_cached(filename)
        _cache.clear()  # the model load is the last reader: do not keep a second copy of the weights alive
        if weights is None:
            return {**container, "model": _tensors(sd)}
        return self._backbone_checkpoint(filename, weights)

    def _backbone_checkpoint(self, filename: str, weights: BackboneWeights) -> dict[str, Any]:
        model = self.model.module if hasattr(self.model, "module") else self.model
        trunk = _find_trunk(model)
        if trunk is None or trunk.spec is None:
            raise ValueError(f"{filename} holds backbone weights ({weights.source_format}), but the model has no "
                             "`backbones` trunk to load them into (MODEL.BACKBONE.NAME is not one of ours)")
        spec: BackboneSpec = trunk.spec
        fresh = spec.build()
        report = load_state_dict_into(fresh, weights.state_dict, weights.source_format, weights.meta,
                                      source=filename, strict=spec.strict_load, drop_classifier=True)
        self.logger.info("Backbone weights:\n" + report.summary())
        detector_keys = set(model.state_dict())
        mapped, unused = {}, []
        for key, value in fresh.state_dict().items():
            target = next((p + key for p in DETECTOR_PREFIXES if p + key in detector_keys), None)
            if target is None:
                unused.append(key)
            else:
                mapped[target] = value
        if unused:
            self.logger.info(f"{len(unused)} backbone tensors are not part of this detector, e.g. {unused[:3]}")
        return {"model": mapped, "__author__": f"backbones ({weights.source_format})", "matching_heuristics": False}

    def save(self, name: str, **kwargs: Any) -> None:
        """As fvcore's, but written to a temporary file and renamed: never a truncated checkpoint."""
        if not self.save_dir or not self.save_to_disk:
            return
        data = {"model": self.model.state_dict()}
        for key, obj in self.checkpointables.items():
            data[key] = obj.state_dict()
        data.update(kwargs)
        save_file = os.path.join(self.save_dir, f"{name}.pth")
        self.logger.info(f"Saving checkpoint to {save_file}")
        atomic_torch_save(data, save_file)
        self.tag_last_checkpoint(os.path.basename(save_file))

    def tag_last_checkpoint(self, last_filename_basename: str) -> None:
        """`last_checkpoint` is written atomically too, and only after the file it names is complete."""
        path = os.path.join(self.save_dir, "last_checkpoint")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(last_filename_basename)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
