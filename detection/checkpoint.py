"""Detectron2 checkpointing that reads files safely and loads pretrained backbones through `backbones`.

`BackbonesCheckpointer` is Detectron2's DetectionCheckpointer with one change, in `_load_file`:
- every file is read without executing code (torch weights_only / restricted unpickler), including `.pkl`;
- a full detector checkpoint (ours or Detectron2's: keys already named like the model's) loads as usual;
- anything else is *backbone* weights in any format `backbones.load_pretrained` reads (torchvision, timm,
  Detectron2 classification `.pkl`, MSRA Caffe2 blobs, our classification checkpoints). They are loaded straight
  into the detector's `backbones_model` (BackbonesRCNN: the one model whose stages are the trunk and the RoI
  head), strictly, classifier dropped; the detector's names of those tensors follow from tensor identity.
The path is one way: file -> `backbones` model -> detector. Nothing is cached between reads.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
from detectron2.checkpoint import DetectionCheckpointer
from detectron2.data import DatasetCatalog, MetadataCatalog

from backbones.checkpoint_io import atomic_torch_save, atomic_write_text
from backbones.pretrained import WeightsFile, load_state_dict_into, read_weights_file, unusable_values
from classification.engine.run_directory import last_checkpoint_file
from classification.engine.run_files import LAST_CHECKPOINT

__all__ = ["BackbonesCheckpointer", "read_weights_file", "WeightsFile", "CLASSES_KEY", "dataset_classes",
           "check_checkpoint_classes"]

logger = logging.getLogger(__name__)

CLASSES_KEY = "thing_classes"  # in a checkpoint's trainer state: the training data's class names, in id order

def _tensors(sd: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v for k, v in sd.items()}


def dataset_classes(dataset: str) -> list[str] | None:
    """The class names of a registered dataset in the order of the model's class ids (None when not known)."""
    classes = MetadataCatalog.get(dataset).get("thing_classes")
    if classes is None and dataset in DatasetCatalog.list():  # a COCO-format loader sets them when it first runs
        DatasetCatalog.get(dataset)
        classes = MetadataCatalog.get(dataset).get("thing_classes")
    return list(classes) if classes is not None else None


def check_checkpoint_classes(recorded: list[str] | None, dataset: str, source: str, action: str) -> None:
    """ValueError when a checkpoint trained on `recorded` classes (its ids: their order) meets a dataset that
    numbers its classes otherwise: --eval-only scored AP 0.00 with rc 0, --resume trained with swapped classes.
    A checkpoint written before classes were recorded (None) is not checked."""
    now = dataset_classes(dataset)
    if recorded is None or now is None or list(recorded) == now:
        return
    if sorted(recorded) == sorted(now):
        how = "the same classes in another order (other ids)"
    else:
        how = (f"other classes (only in the checkpoint: {sorted(set(recorded) - set(now))[:5]}, only in the "
               f"dataset: {sorted(set(now) - set(recorded))[:5]})")
    raise ValueError(f"{source} was trained on classes {list(recorded)[:10]}; {dataset} has {how}: {now[:10]}. "
                     f"{action} would score or train class i as another; use a dataset numbered as the checkpoint's")


class BackbonesCheckpointer(DetectionCheckpointer):
    """DetectionCheckpointer + safe reading + pretrained backbones in any supported format. Writes atomically.

    strict_backbone: backbone weights must fit the model exactly (MODEL.BACKBONES.STRICT_LOAD).
    """

    def __init__(self, model, save_dir: str = "", *, strict_backbone: bool = True, **checkpointables):
        super().__init__(model, save_dir, **checkpointables)
        self.strict_backbone = strict_backbone

    def _load_file(self, filename: str) -> dict[str, Any]:
        weights = read_weights_file(filename)
        if weights.is_detector:
            return {**weights.container, "model": _tensors(weights.state_dict)}
        return self._load_backbone(filename, weights)

    def _load_backbone(self, filename: str, weights: WeightsFile) -> dict[str, Any]:
        detector = self.model.module if hasattr(self.model, "module") else self.model
        target = getattr(detector, "backbones_model", None)
        if target is None:
            raise ValueError(f"{filename} holds backbone weights ({weights.source_format}), but the model has no "
                             "`backbones` model to load them into (MODEL.META_ARCHITECTURE is not BackbonesRCNN)")
        report = load_state_dict_into(target, weights.state_dict, weights.source_format, weights.meta,
                                      source=filename, strict=self.strict_backbone, drop_classifier=True)
        self.logger.info("Backbone weights:\n" + report.summary())
        # The detector's name of each loaded tensor: the same storage appears under backbone.* / roi_heads.*
        names = {(t.data_ptr(), tuple(t.shape)): k for k, t in detector.state_dict(keep_vars=False).items()}
        mapped, unused = {}, []
        for key, tensor in target.state_dict().items():
            name = names.get((tensor.data_ptr(), tuple(tensor.shape)))
            if name is None:
                unused.append(key)
            else:
                mapped[name] = tensor.detach().clone()
        if unused:
            self.logger.info(f"{len(unused)} backbone tensors are not part of this detector, e.g. {unused[:3]}")
        return {"model": mapped, "__author__": f"backbones ({weights.source_format})", "matching_heuristics": False}

    def load_for_evaluation(self, path: str, datasets: tuple[str, ...] = ()) -> None:
        """Load a complete detector for evaluation, or refuse (ValueError naming the problem; nothing is loaded):
        backbone-only weights (a classification checkpoint leaves the RPN and box head random), a checkpoint of
        another architecture, width or depth (missing / unexpected keys, other shapes), and tensors that are not
        finite or not floating point where the model's are."""
        weights = read_weights_file(path)
        trainer_state = weights.container.get("trainer")
        recorded = trainer_state.get(CLASSES_KEY) if isinstance(trainer_state, dict) else None
        for dataset in datasets:  # the test datasets it will be scored on
            check_checkpoint_classes(recorded, dataset, path, "Evaluating it")
        if not weights.is_detector:
            raise ValueError(f"{path} holds {weights.source_format} backbone weights, not a detector: evaluating "
                             "it would score a randomly initialised RPN and box head. Evaluate a detector "
                             "checkpoint (a training run's model_final.pth), or train from these weights first")
        sd, model_sd = _tensors(weights.state_dict), self.model.state_dict()
        optional = ("num_batches_tracked",)
        problems = []
        missing = [k for k in model_sd if k not in sd and not k.endswith(optional)]
        unexpected = [k for k in sd if k not in model_sd and not k.endswith(optional)]
        shapes = [f"{k} {tuple(sd[k].shape)} vs {tuple(model_sd[k].shape)}" for k in sd
                  if k in model_sd and torch.is_tensor(sd[k]) and sd[k].shape != model_sd[k].shape]
        bad = unusable_values(sd, model_sd)  # the check load_pretrained applies to backbone weights
        for what, keys in (("missing in the checkpoint", missing), ("not in this model", unexpected),
                           ("shape differs", shapes),
                           ("integer tensors for float parameters", [b for b in bad if " values for a " in b]),
                           ("inf/NaN values", [b for b in bad if "inf/NaN" in b]),
                           ("negative running variances", [b for b in bad if "(a variance)" in b])):
            if keys:
                problems.append(f"{len(keys)} {what}, e.g. {keys[:3]}")
        if problems:
            raise ValueError(f"{path} does not fit this detector, so it cannot be evaluated: {'; '.join(problems)}. "
                             "Check the config (MODEL.BACKBONES.NAME, WIDTH, ROI_HEADS.NUM_CLASSES) against the "
                             "run that wrote it")
        self.model.load_state_dict({k: v for k, v in sd.items() if k in model_sd}, strict=False)

    def has_checkpoint(self) -> bool:
        """As fvcore's, but a last_checkpoint that is empty or names a missing file is a ValueError saying so (fvcore
        asserts "Checkpoint ... not found!" on it, or loads the directory)."""
        return bool(self.save_dir) and last_checkpoint_file(self.save_dir) is not None

    def get_checkpoint_file(self) -> str:
        path = last_checkpoint_file(self.save_dir) if self.save_dir else None
        return str(path) if path is not None else ""

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
        atomic_write_text(os.path.join(self.save_dir, LAST_CHECKPOINT), last_filename_basename)
