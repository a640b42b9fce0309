"""The full-size files the dataset and evaluation sections read, generated in the real formats (no download is
possible): a COCO train2017-sized instances json, a COCO val2017-sized json with 100 detections per image, VOC2007
test (4,952 XML annotations, split file, 100 detections per image) and an ImageNet-sized image folder. Image files
are empty (nothing here decodes them: registration checks that they exist, the folder scan lists them).

Each set is written once under output/benchmark/generated/<name>[-x<scale>] ($BENCHMARK_GENERATED_DIR if set)
and reused; a `.complete` marker written
last says the set is whole. `scale` shrinks every count (1.0: the real sizes; the tests use ~0.001).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import checkout

__all__ = ["COCO_CATEGORY_IDS", "CocoSet", "VocSet", "coco_train", "coco_val", "voc07_test", "image_folder"]

# COCO's 80 category ids (1..90 with gaps): registration maps them to contiguous ids, evaluation maps them back
COCO_CATEGORY_IDS = (*range(1, 12), *range(13, 26), 27, 28, *range(31, 45), *range(46, 66), 67, 70,
                     *range(72, 83), *range(84, 91))
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")
IMAGE_SIZES = ((640, 480), (480, 640), (640, 427), (500, 375), (640, 360), (375, 500))  # (width, height)


@dataclass(frozen=True)
class CocoSet:
    json_file: Path
    image_root: Path
    detections: Path | None  # COCO results json (dataset category ids), or None


@dataclass(frozen=True)
class VocSet:
    root: Path  # VOC2007 layout: Annotations/, JPEGImages/, ImageSets/Main/test.txt
    detections: Path  # det_test_{class}.txt files, py-faster-rcnn's format, under this directory


def _base(name: str, scale: float) -> Path:
    """$BENCHMARK_GENERATED_DIR, else output/benchmark/generated in the checkout."""
    where = os.environ.get("BENCHMARK_GENERATED_DIR") or checkout().root / "output" / "benchmark" / "generated"
    return Path(where) / (name if scale == 1.0 else f"{name}-x{scale:g}")


def _cached(path: Path, build) -> Path:
    """`build(path)` once: a set without its marker (an interrupted generation) is removed and written again."""
    if not (path / ".complete").is_file():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        build(path)
        (path / ".complete").write_text("")
    return path


def _count(n: int, scale: float) -> int:
    return max(4, round(n * scale))


def _touch_all(directory: Path, names) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        os.close(os.open(directory / name, os.O_CREAT | os.O_WRONLY, 0o644))


def _objects(rng, sizes: np.ndarray, per_image_mean: float):
    """Ground-truth boxes (x, y, w, h; inside their image, 2 decimals) for each image: (owner index, xywh)."""
    counts = np.clip(rng.poisson(per_image_mean, len(sizes)), 1, 60)
    owner = np.repeat(np.arange(len(sizes)), counts)
    w_img, h_img = sizes[owner, 0], sizes[owner, 1]
    w = np.round(np.minimum(w_img, np.exp(rng.uniform(np.log(4), np.log(600), len(owner)))), 2)
    h = np.round(np.minimum(h_img, w * rng.uniform(0.4, 2.0, len(owner))), 2)
    w = np.maximum(w, 1.0)
    h = np.maximum(h, 1.0)
    x = np.round(rng.uniform(0, 1, len(owner)) * (w_img - w), 2)
    y = np.round(rng.uniform(0, 1, len(owner)) * (h_img - h), 2)
    return owner, np.stack([x, y, w, h], 1)


def _detections(rng, owner: np.ndarray, boxes: np.ndarray, labels: np.ndarray, sizes: np.ndarray, per_image: int,
                num_classes: int):
    """`per_image` detections for every image: up to three jittered copies of each ground-truth box (the right
    class 80% of the time), the rest random boxes of random classes; float32 scores (distinct, so no ranking
    depends on how ties are broken). Returns (image index, xywh float32, class, score) arrays."""
    n_img = len(sizes)
    copies = np.repeat(np.arange(len(owner)), 3)
    copies = copies[rng.uniform(size=len(copies)) < 0.8]
    per_img_true = np.bincount(owner[copies], minlength=n_img)
    keep = np.ones(len(copies), dtype=bool)
    seen = np.zeros(n_img, dtype=np.int64)
    for k, img in enumerate(owner[copies]):  # at most per_image detections an image
        keep[k] = seen[img] < per_image
        seen[img] += 1
    copies = copies[keep]
    per_img_true = np.minimum(per_img_true, per_image)
    jitter = rng.normal(0, 0.08, (len(copies), 4)) * boxes[copies][:, [2, 3, 2, 3]]
    true_boxes = boxes[copies] + jitter
    true_labels = np.where(rng.uniform(size=len(copies)) < 0.8, labels[copies],
                           rng.integers(0, num_classes, len(copies)))
    n_rand = per_image - per_img_true
    rand_owner = np.repeat(np.arange(n_img), n_rand)
    rs = sizes[rand_owner]
    rw = rng.uniform(8, 300, len(rand_owner))
    rh = rng.uniform(8, 300, len(rand_owner))
    rand_boxes = np.stack([rng.uniform(0, 1, len(rand_owner)) * np.maximum(rs[:, 0] - rw, 1),
                           rng.uniform(0, 1, len(rand_owner)) * np.maximum(rs[:, 1] - rh, 1), rw, rh], 1)
    det_owner = np.concatenate([owner[copies], rand_owner])
    det_boxes = np.concatenate([true_boxes, rand_boxes]).astype(np.float32)
    det_boxes[:, 2:] = np.maximum(det_boxes[:, 2:], 1.0)
    det_labels = np.concatenate([true_labels, rng.integers(0, num_classes, len(rand_owner))])
    raw = np.concatenate([rng.uniform(0.3, 1.0, len(copies)), rng.uniform(0.0, 0.7, len(rand_owner))])
    ranks = np.empty(len(raw), dtype=np.int64)
    ranks[np.argsort(raw, kind="stable")] = np.arange(len(raw))
    scores = ((ranks + 1) / (len(raw) + 1)).astype(np.float32)  # the same order, every value distinct in float32
    order = np.argsort(det_owner, kind="stable")
    return det_owner[order], det_boxes[order], det_labels[order], scores[order]


def _coco_json(rng, n_images: int, per_image: float, path: Path, image_root: Path, first_id: int) -> tuple:
    sizes = np.array(IMAGE_SIZES)[rng.integers(0, len(IMAGE_SIZES), n_images)]
    owner, boxes = _objects(rng, sizes, per_image)
    labels = rng.integers(0, len(COCO_CATEGORY_IDS), len(owner))
    crowd = rng.uniform(size=len(owner)) < 0.01
    ids = first_id + np.arange(n_images)
    names = [f"{i:012d}.jpg" for i in ids]
    images = [{"license": 1, "file_name": n, "height": int(h), "width": int(w), "id": int(i)}
              for n, (w, h), i in zip(names, sizes.tolist(), ids.tolist())]
    # polygons as long as COCO's (about 24 vertices on average): what makes its json 448 MB to parse
    vertices = rng.integers(6, 43, len(owner))
    anns = []
    for k, (o, (x, y, w, h), c, cr, v) in enumerate(zip(owner.tolist(), boxes.tolist(), labels.tolist(),
                                                       crowd.tolist(), vertices.tolist())):
        t = np.linspace(0, 2 * np.pi, v, endpoint=False)
        poly = np.round(np.stack([x + w / 2 * (1 + np.cos(t)), y + h / 2 * (1 + np.sin(t))], 1), 2).ravel()
        anns.append({"segmentation": [poly.tolist()], "area": round(w * h * 0.7, 2), "iscrowd": int(cr),
                     "image_id": int(ids[o]), "bbox": [x, y, w, h], "category_id": COCO_CATEGORY_IDS[c],
                     "id": 900_000 + k})
    cats = [{"supercategory": "thing", "id": c, "name": f"class_{c}"} for c in COCO_CATEGORY_IDS]
    path.write_text(json.dumps({"info": {"description": "generated"}, "licenses": [{"id": 1, "name": "none"}],
                                "images": images, "annotations": anns, "categories": cats}))
    _touch_all(image_root, names)
    return sizes, owner, boxes, labels, ids


def coco_train(scale: float = 1.0) -> CocoSet:
    """train2017's size: 118,287 images, ~860k annotations (polygons, 1% crowd), 80 categories (~0.4 GB)."""
    def build(root: Path) -> None:
        _coco_json(np.random.default_rng(1), _count(118_287, scale), 7.3, root / "instances_train.json",
                   root / "train", 1)

    root = _cached(_base("coco_train", scale), build)
    return CocoSet(root / "instances_train.json", root / "train", None)


def coco_val(scale: float = 1.0) -> CocoSet:
    """val2017's size (5,000 images, ~36k annotations) and 100 detections an image (500k), a results json."""
    def build(root: Path) -> None:
        rng = np.random.default_rng(2)
        sizes, owner, boxes, labels, ids = _coco_json(rng, _count(5_000, scale), 7.3, root / "instances_val.json",
                                                      root / "val", 1)
        d_owner, d_boxes, d_labels, scores = _detections(rng, owner, boxes, labels, sizes, 100,
                                                         len(COCO_CATEGORY_IDS))
        results = [{"image_id": int(ids[o]), "category_id": COCO_CATEGORY_IDS[c], "bbox": b, "score": s}
                   for o, c, b, s in zip(d_owner.tolist(), d_labels.tolist(), d_boxes.tolist(), scores.tolist())]
        (root / "detections.json").write_text(json.dumps(results))

    root = _cached(_base("coco_val", scale), build)
    return CocoSet(root / "instances_val.json", root / "val", root / "detections.json")


def _voc_xml(name: str, w: int, h: int, objects: list[tuple]) -> str:
    objs = "".join(
        f"<object><name>{c}</name><pose>Unspecified</pose><truncated>{t}</truncated><difficult>{d}</difficult>"
        f"<bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for c, t, d, (x0, y0, x1, y1) in objects)
    return (f"<annotation><folder>VOC2007</folder><filename>{name}.jpg</filename><size><width>{w}</width>"
            f"<height>{h}</height><depth>3</depth></size><segmented>0</segmented>{objs}</annotation>")


def voc07_test(scale: float = 1.0) -> VocSet:
    """VOC2007 test's size: 4,952 images, ~15k objects (10% difficult), integer 1-based boxes; 100 detections
    an image (~495k) in py-faster-rcnn's det_test_{class}.txt files
    (`image score x0 y0 x1 y1`, 1-based, every number written exactly: float32 values, repr)."""
    def build(root: Path) -> None:
        rng = np.random.default_rng(3)
        n = _count(4_952, scale)
        sizes = np.array(IMAGE_SIZES)[rng.integers(0, len(IMAGE_SIZES), n)]
        owner, boxes = _objects(rng, sizes, 3.0)
        boxes = np.round(boxes)  # VOC's pixel indices
        boxes[:, 2:] = np.maximum(boxes[:, 2:], 2)
        labels = rng.integers(0, len(VOC_CLASSES), len(owner))
        difficult = (rng.uniform(size=len(owner)) < 0.1).astype(int)
        truncated = (rng.uniform(size=len(owner)) < 0.3).astype(int)
        names = [f"{i:06d}" for i in range(1, n + 1)]
        (root / "Annotations").mkdir()
        per_image: list[list] = [[] for _ in range(n)]
        for o, (x, y, w, h), c, t, d in zip(owner.tolist(), boxes.tolist(), labels.tolist(), truncated.tolist(),
                                            difficult.tolist()):
            x0, y0 = int(x) + 1, int(y) + 1
            per_image[o].append((VOC_CLASSES[c], t, d, (x0, y0, min(x0 + int(w) - 1, int(sizes[o, 0])),
                                                          min(y0 + int(h) - 1, int(sizes[o, 1])))))
        for name, (w, h), objs in zip(names, sizes.tolist(), per_image):
            (root / "Annotations" / f"{name}.xml").write_text(_voc_xml(name, w, h, objs))
        (root / "ImageSets" / "Main").mkdir(parents=True)
        (root / "ImageSets" / "Main" / "test.txt").write_text("\n".join(names) + "\n")
        _touch_all(root / "JPEGImages", [f"{m}.jpg" for m in names])
        d_owner, d_boxes, d_labels, scores = _detections(rng, owner, boxes, labels, sizes, 100, len(VOC_CLASSES))
        x0y0 = d_boxes[:, :2] + np.float32(1)  # 1-based corners, float32 like a detector's output
        x1y1 = d_boxes[:, :2] + d_boxes[:, 2:]
        (root / "detections").mkdir()
        for c, cls in enumerate(VOC_CLASSES):
            sel = np.flatnonzero(d_labels == c)
            lines = [f"{names[o]} {float(s)!r} {float(a)!r} {float(b)!r} {float(e)!r} {float(f)!r}"
                     for o, s, (a, b), (e, f) in zip(d_owner[sel].tolist(), scores[sel], x0y0[sel], x1y1[sel])]
            (root / "detections" / f"det_test_{cls}.txt").write_text("\n".join(lines) + "\n")

    root = _cached(_base("voc07_test", scale), build)
    return VocSet(root, root / "detections")


def image_folder(scale: float = 1.0) -> Path:
    """ImageNet train's layout and size: 1,000 class folders, 1,281,167 empty .JPEG files; returns the root
    (the split is `train`)."""
    def build(root: Path) -> None:
        n_classes = max(2, round(1000 * min(1.0, scale * 10)))
        total = _count(1_281_167, scale)
        counts = np.full(n_classes, total // n_classes)
        counts[: total - counts.sum()] += 1
        for k, count in enumerate(counts.tolist()):
            wnid = f"n{1440764 + 37 * k:08d}"
            _touch_all(root / "train" / wnid, [f"{wnid}_{i}.JPEG" for i in range(1, count + 1)])

    return _cached(_base("image_folder", scale), build)
