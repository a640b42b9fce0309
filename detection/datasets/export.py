"""The embedded default written out as a researcher's data would be: the detection scenes as a COCO json + images
and, in the same folder, a VOC layout (Annotations/, ImageSets/Main/, JPEGImages/); the pretraining composites as
an ImageNet-style folder (train/<class>/*.png, val/<class>/*.png). tools/export_embedded.py; the main job on these
files through --detect-coco / --detect-voc / --pretrain-data is the real-data path run on known data (a test
checks that the detection half gives the embedded path's AP to the last digit).

    OUT/detection/annotations/instances_{train,val,val_100}.json   COCO (file_name relative to OUT/detection)
    OUT/detection/{Annotations,ImageSets/Main,JPEGImages}   VOC (splits train, val, val_100), the same images
    OUT/imagefolder/{train,val}/<class>/<item>.png          the composites at their size, lossless
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["export_embedded", "ExportedPaths"]


@dataclass(frozen=True)
class ExportedPaths:
    detection: Path  # COCO json + image root, and the VOC layout
    imagefolder: Path | None  # ImageNet layout; None when not written

    def coco_args(self, test: str = "val") -> list[str]:
        """main_job.py --detect-coco's four values for these files (test: "val", or "val_100", its first scenes)."""
        d = self.detection
        return [str(d / "annotations" / "instances_train.json"), str(d),
                str(d / "annotations" / f"instances_{test}.json"), str(d)]

    def voc_args(self, test: str = "val") -> list[str]:
        """main_job.py --detect-voc's three values for these files."""
        return [str(self.detection), "train", test]


def export_embedded(out: str | Path, *, train_items: int | None = None, val_items: int = 2000,
                    image_size: int = 32, classification: bool = True) -> ExportedPaths:
    """Write the embedded detection set (generated first if needed) and, with `classification`, the first
    `train_items` (default: all) training composites and the first `val_items` test composites at `image_size`.
    Refuses to write into a folder that exists (nothing is overwritten)."""
    from .embedded import default_embedded_root, ensure_embedded_dataset

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists: export into a new folder (nothing is overwritten)")
    ensure_embedded_dataset()
    source = Path(default_embedded_root())
    detection = out / "detection"
    detection.mkdir(parents=True)
    for sub in ("JPEGImages", "Annotations", "ImageSets"):
        shutil.copytree(source / sub, detection / sub)
    (detection / "annotations").mkdir()
    for split in ("train", "val", "val_100"):
        shutil.copyfile(source / "annotations" / f"instances_{split}.json",
                        detection / "annotations" / f"instances_{split}.json")
    folder = _export_composites(out / "imagefolder", train_items, val_items, image_size) if classification else None
    return ExportedPaths(detection, folder)


def _export_composites(root: Path, train_items: int | None, val_items: int, image_size: int) -> Path:
    """The composites as PNG files (lossless: the pixels the embedded path trains on), one folder per class named
    `<label>_<class>` (an image folder's labels are its sorted directory names: these sort into the embedded
    labels, as ImageNet's synset ids do), files numbered in item order (imagefolder-small reads them in that order);
    a class without items in a split still gets its folder, so train and val list the same classes."""
    from classification.data.composited import load_composited

    for split, folder, count in (("train", "train", train_items), ("test", "val", val_items)):
        images, labels, classes, _ = load_composited(split, image_size, 0, count)
        names = [f"{k:0{len(str(len(classes) - 1))}d}_{c}" for k, c in enumerate(classes)]
        for name in names:
            (root / folder / name).mkdir(parents=True, exist_ok=True)
        for i, (img, label) in enumerate(zip(images, np.asarray(labels))):
            Image.fromarray(img).save(root / folder / names[label] / f"{i:06d}.png")
    return root
