"""The embedded default detection dataset: deterministic scenes of real objects, in COCO *and* VOC layouts.

Objects are Fashion-MNIST items (real photographs of clothing; Debian `dataset-fashion-mnist`) when installed,
else synthetic shapes: the same source the classification pipeline pretrains on (classification.data.objects).
Each image is a smooth random background with 1-2 tinted, rescaled objects; boxes are the tight boxes of the
objects' masks. Train scenes use the objects' train split and val scenes their test split (no object shared).

    root/JPEGImages/*.jpg, root/Annotations/*.xml, root/ImageSets/Main/{train,val,val_100}.txt  (VOC)
    root/annotations/instances_{train,val,val_100}.json                                 (COCO, same images)
    root/manifest.json                                                                   (how it was made)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from classification.data.objects import ObjectSource, load_object_source, paste_object, random_background

__all__ = ["EmbeddedSpec", "DETECTION_CLASSES", "SMALL_VAL_SCENES", "ensure_embedded_dataset",
           "generate_embedded_dataset", "register_embedded", "default_embedded_root", "expected_source"]

GENERATOR_VERSION = 4  # 3: the train_fit / train_holdout split files; 4: 1000 val scenes and the val_100 prefix
SMALL_VAL_SCENES = 100  # `val_100`: the first scenes of val
# Four classes with distinct silhouettes, so a smoke-scale schedule can learn them.
DETECTION_CLASSES = {"fashion-mnist": ("tshirt_top", "trouser", "sneaker", "bag"),
                     "synthetic-shapes": ("disc", "square", "triangle", "cross")}


@dataclass(frozen=True)
class EmbeddedSpec:
    num_train: int = 400
    # The val split: 1000 scenes, so that one test set's sampling is small beside the seeds' spread (the main job
    # measures it: a paired bootstrap over these images); its first 100 are `val_100` -- the val split before
    # 2026-12-06, scene for scene (one generator stream) -- where smoke-scale runs are scored.
    num_val: int = 1000
    image_size: int = 128  # square images
    min_object: int = 48  # objects span 3-6 cells of a stride-16 feature map (smaller ones barely train in minutes)
    max_object: int = 96
    max_objects: int = 2
    seed: int = 0
    source: str = "fashion-mnist"  # preferred object source; falls back to synthetic shapes
    num_holdout: int = 100  # the last N train scenes also form `train_holdout` (the rest `train_fit`): schedules and
    #                         settings are chosen by training on train_fit and scoring train_holdout, never val


def default_embedded_root() -> Path:
    return Path(os.path.expanduser(os.getenv("DETECTRON2_DATASETS", "datasets"))) / "embedded"


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _scene(rng: np.random.Generator, objects: ObjectSource, spec: EmbeddedSpec):
    size = spec.image_size
    img = random_background(rng, size)
    boxes, labels = [], []
    for _ in range(int(rng.integers(1, spec.max_objects + 1))):
        k = int(rng.integers(len(objects.labels)))
        side = int(rng.integers(spec.min_object, spec.max_object + 1))
        gray = np.asarray(Image.fromarray(objects.images[k]).resize((side, side), Image.BILINEAR), np.float32) / 255
        ys, xs = np.nonzero(gray > 0.2)
        if len(xs) == 0:
            continue
        for _attempt in range(20):
            x, y = int(rng.integers(0, size - side + 1)), int(rng.integers(0, size - side + 1))
            box = [x + xs.min(), y + ys.min(), x + xs.max() + 1.0, y + ys.max() + 1.0]
            if all(_iou(box, b) < 0.2 for b in boxes):
                break
        else:
            continue
        paste_object(img, gray, x, y, rng)
        boxes.append([float(v) for v in box])
        labels.append(int(objects.labels[k]))
    return np.clip(img, 0, 255).astype(np.uint8), boxes, labels


def _voc_xml(path: Path, file_name: str, size: int, boxes, labels, class_names) -> None:
    root = ET.Element("annotation")
    ET.SubElement(root, "filename").text = file_name
    s = ET.SubElement(root, "size")
    for tag, v in (("width", size), ("height", size), ("depth", 3)):
        ET.SubElement(s, tag).text = str(v)
    for box, label in zip(boxes, labels):
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = class_names[label]
        ET.SubElement(obj, "pose").text = "Unspecified"  # every tag of a PASCAL VOC object, as the devkit writes
        ET.SubElement(obj, "truncated").text = "0"
        ET.SubElement(obj, "difficult").text = "0"
        bb = ET.SubElement(obj, "bndbox")
        # VOC pixels are 1-based and inclusive: a box [x0, x1) in 0-based continuous coordinates is x0+1..x1.
        for tag, v in zip(("xmin", "ymin", "xmax", "ymax"), (box[0] + 1, box[1] + 1, box[2], box[3])):
            ET.SubElement(bb, tag).text = f"{v:g}"
    ET.ElementTree(root).write(path)


def generate_embedded_dataset(root: str | os.PathLike, spec: EmbeddedSpec = EmbeddedSpec()) -> dict:
    """(Re)write the dataset under `root`; returns its manifest. Same spec and source -> same files."""
    root = Path(root)
    tmp = root.with_name(root.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    for d in ("JPEGImages", "Annotations", "ImageSets/Main", "annotations"):
        (tmp / d).mkdir(parents=True)
    train_src = load_object_source("train", prefer=spec.source, seed=spec.seed)
    source_name = train_src.name
    class_names = DETECTION_CLASSES[source_name]
    counts = {}
    for split, n, obj_split in (("train", spec.num_train, "train"), ("val", spec.num_val, "test")):
        objects = (train_src if obj_split == "train" else
                   load_object_source(obj_split, prefer=spec.source, seed=spec.seed)).subset(class_names)
        rng = np.random.default_rng([spec.seed, 1 if split == "train" else 2])
        images, annotations, ids = [], [], []
        for i in range(n):
            img, boxes, labels = _scene(rng, objects, spec)
            stem = f"{split}_{i:05d}"
            Image.fromarray(img).save(tmp / "JPEGImages" / f"{stem}.jpg", quality=92)
            _voc_xml(tmp / "Annotations" / f"{stem}.xml", f"{stem}.jpg", spec.image_size, boxes, labels, class_names)
            images.append({"id": i + 1, "file_name": f"JPEGImages/{stem}.jpg", "width": spec.image_size,
                           "height": spec.image_size})
            for box, label in zip(boxes, labels):
                w, h = box[2] - box[0], box[3] - box[1]
                annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": label + 1,
                                    "bbox": [box[0], box[1], w, h], "area": w * h, "iscrowd": 0})
            ids.append(stem)
        (tmp / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(ids) + "\n")
        coco = {"images": images, "annotations": annotations,
                "categories": [{"id": k + 1, "name": c} for k, c in enumerate(class_names)]}
        (tmp / "annotations" / f"instances_{split}.json").write_text(json.dumps(coco))
        counts[split] = {"images": n, "objects": len(annotations)}
        if split == "val":  # its first scenes: the smoke-scale test set (the same scenes at any num_val above it)
            k = min(SMALL_VAL_SCENES, n)
            _write_subset(tmp, "val_100", coco, lambda i, k=k: i <= k, counts)
            (tmp / "ImageSets" / "Main" / "val_100.txt").write_text("\n".join(ids[:k]) + "\n")
        if split == "train":  # the model-selection split: fit on the first scenes, score the held-out last ones
            cut = n - min(spec.num_holdout, n)
            for part, keep in (("train_fit", lambda i, c=cut: i <= c), ("train_holdout", lambda i, c=cut: i > c)):
                _write_subset(tmp, part, coco, keep, counts)
    manifest = {"generator_version": GENERATOR_VERSION, "spec": asdict(spec), "source": source_name,
                "classes": list(class_names), "counts": counts}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if root.exists():
        shutil.rmtree(root)
    tmp.rename(root)  # a crash mid-generation never leaves a half-written dataset under `root`
    return manifest


def _write_subset(root: Path, part: str, coco: dict, keep, counts: dict) -> None:
    """annotations/instances_<part>.json: the images whose id `keep` accepts, with their annotations."""
    sub = {"images": [im for im in coco["images"] if keep(im["id"])],
           "annotations": [a for a in coco["annotations"] if keep(a["image_id"])], "categories": coco["categories"]}
    (root / "annotations" / f"instances_{part}.json").write_text(json.dumps(sub))
    counts[part] = {"images": len(sub["images"]), "objects": len(sub["annotations"])}


def ensure_embedded_dataset(root: str | os.PathLike | None = None, spec: EmbeddedSpec = EmbeddedSpec()) -> dict:
    """Generate the dataset unless `root` already holds one made from the same spec (and source)."""
    root = Path(root) if root is not None else default_embedded_root()
    manifest = _matching_manifest(root, spec)
    if manifest is not None:
        return manifest
    # one generator at a time: the ranks of a --num-gpus 2 run (or two runs) on a fresh machine all get here;
    # the first generates, the others wait for it and then find its manifest
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = _matching_manifest(root, spec)
        return manifest if manifest is not None else generate_embedded_dataset(root, spec)


def _matching_manifest(root: Path, spec: EmbeddedSpec) -> dict | None:
    """The manifest of the dataset under `root` if it was made from `spec` (and this machine's source)."""
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return None
    if (manifest.get("spec") == asdict(spec) and manifest.get("generator_version") == GENERATOR_VERSION
            and manifest.get("source") == expected_source(spec)):
        return manifest
    return None


def expected_source(spec: EmbeddedSpec) -> str:
    """The object source a generation with `spec` would use here (without generating anything)."""
    from classification.data.objects import fashion_mnist_files

    has_fmnist = all(f.is_file() for f in fashion_mnist_files("test"))
    return "fashion-mnist" if spec.source == "fashion-mnist" and has_fmnist else "synthetic-shapes"


def register_embedded(root: str | os.PathLike | None = None, spec: EmbeddedSpec = EmbeddedSpec(),
                      prefix: str = "embedded") -> list[str]:
    """Register `{prefix}_train/_val/_val_100/_train_fit/_train_holdout` (COCO json) and `{prefix}_voc_train/_val/
    _val_100` (VOC XML)
    lazily: the files are generated the first time a split is loaded (or reused if `root` already holds this spec).
    Returns the names."""
    from detectron2.data import DatasetCatalog, MetadataCatalog

    from .coco import load_coco_checked
    from .voc import load_voc_instances

    root = Path(root) if root is not None else default_embedded_root()
    classes = list(DETECTION_CLASSES[expected_source(spec)])
    names = []
    for split in ("train", "val", "val_100", "train_fit", "train_holdout"):
        json_file = str(root / "annotations" / f"instances_{split}.json")
        kinds = [(f"{prefix}_{split}",
                  lambda j=json_file, n=f"{prefix}_{split}": load_coco_checked(j, str(root), n),
                  {"json_file": json_file, "image_root": str(root), "evaluator_type": "coco"})]
        if split in ("train", "val", "val_100"):
            kinds.append((f"{prefix}_voc_{split}", lambda s=split: load_voc_instances(str(root), s, classes),
                          {"dirname": str(root), "split": split, "year": 2012, "evaluator_type": "pascal_voc"}))
        for name, loader, meta in kinds:
            if name in DatasetCatalog.list():
                DatasetCatalog.remove(name)
                MetadataCatalog.remove(name)

            def load(loader=loader):
                ensure_embedded_dataset(root, spec)
                return loader()

            DatasetCatalog.register(name, load)
            MetadataCatalog.get(name).set(thing_classes=classes, **meta)
            names.append(name)
    return names
