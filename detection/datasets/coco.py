"""COCO-format datasets: the instances json read once, validated (validation.py), and turned into both what
training reads (Detectron2 dataset dicts) and what evaluation scores against (`coco_ground_truth`), so the two
always hold the same boxes.

Refused with one line naming the file, the entry and the field: ids the COCO API misreads (an annotation id 0 is
its "no match", a negative or huge one is misread by faster-coco-eval: perfect detections scored 62.6-87.6), an
iscrowd that is not 0/1 (a string "0" was a crowd region to training and an object to evaluation), an "ignore"
flag (pycocotools overwrites it with iscrowd), a width that is not a positive integer, a category name that is not
a string, duplicate ids or names, an annotation of an image or category the file does not list. Boxes beyond the
image are clipped, empty ones dropped -- for training *and* evaluation (`coco_ground_truth`), logged with counts.

Only boxes are read (this is a box-detection benchmark): a segmentation Detectron2 would find invalid (a 2-point
polygon) no longer drops its annotation's valid box from training.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import BoxMode

from backbones.bounded_read import DuplicateKey, MiB, UnreadableFile, read_bytes, unique_keys

from .validation import (
    DatasetFormatError,
    boxes_array,
    bulk_objects,
    check_ids,
    clip_boxes,
    log_box_changes,
    xywh_to_xyxy,
)

__all__ = ["DatasetFormatError", "CocoGroundTruth", "coco_ground_truth", "load_coco_checked", "register_coco",
           "read_coco_json", "contiguous_category_ids"]

logger = logging.getLogger(__name__)

COCO_JSON_LIMIT = 4096 * MiB  # instances_train2017.json is 448 MB; Objects365-size files are a few GB


def read_coco_json(json_file: str) -> dict:
    """The file parsed once, or a one-line error naming it."""
    if not os.path.exists(json_file):  # a dangling symlink too
        raise FileNotFoundError(f"COCO annotation file not found: {json_file}")
    try:
        raw = read_bytes(json_file, limit=COCO_JSON_LIMIT)  # a FIFO blocked open(); /dev/zero filled memory
    except UnreadableFile as err:
        raise DatasetFormatError(str(err)) from None
    try:
        # decoded, then the bytes freed before the parse: json.loads(bytes) held both (+0.45 GB at train2017's size)
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        del raw
        data = json.loads(text, object_pairs_hook=unique_keys)
        del text
    except json.JSONDecodeError as err:
        raise DatasetFormatError(f"{json_file}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") \
            from None
    except DuplicateKey as err:
        raise DatasetFormatError(f"{json_file}: {err}") from None
    except UnicodeDecodeError as err:
        raise DatasetFormatError(f"{json_file}: not UTF-8/16/32 JSON text ({err.reason} at byte {err.start})") \
            from None
    except RecursionError:
        raise DatasetFormatError(f"{json_file}: JSON nested too deeply to be a COCO instances file") from None
    except ValueError as err:  # a 5000-digit integer: Python's int-conversion limit, a traceback before
        raise DatasetFormatError(f"{json_file}: not a COCO instances file: {err}") from None
    if not isinstance(data, dict):
        raise DatasetFormatError(f"{json_file}: a COCO instances file is a JSON object with images, annotations "
                                 f"and categories, not a {type(data).__name__}")
    return data


@dataclass
class CocoGroundTruth:
    """A validated COCO instances file. `dataset`: the file's dict as evaluation scores against it (annotations
    whose box training drops are left out, clipped boxes clipped, iscrowd 0/1, area set); `train_boxes`: the XYXY
    box of each of its annotations as training reads it (float32 arithmetic, as Detectron2's BoxMode.convert)."""

    json_file: str
    dataset: dict
    train_boxes: list = field(repr=False)
    clipped: int = 0
    dropped: int = 0

    def describe_changes(self) -> str:
        """The difference from the file, for a run's records ('' when none)."""
        if not (self.clipped or self.dropped):
            return ""
        return (f"{self.json_file}: {self.clipped} boxes clipped to their image and {self.dropped} empty or negative "
                "boxes dropped, in training and evaluation alike")


def _list(data: dict, key: str, json_file: str, required: bool) -> list:
    items = data.get(key)
    if key not in data and not required:  # a test set without ground truth leaves the key out; null is refused:
        return []                         # it was read as a ground truth with no objects
    if not isinstance(items, list):
        if key == "categories" and not items:
            raise DatasetFormatError(f"{json_file}: no categories; a COCO instances file lists its classes under "
                                     "'categories'")
        raise DatasetFormatError(f"{json_file}: no '{key}' list (not a COCO instances file?)" if key not in data else
                                 f"{json_file}: '{key}' is {'null' if items is None else 'a ' + type(items).__name__}"
                                 ", not a list" + ("" if required else " (leave the key out: no ground truth)"))
    bad = next((i for i, item in enumerate(items) if not isinstance(item, dict)), None)
    if bad is not None:
        raise DatasetFormatError(f"{json_file}: {key}[{bad}] is {items[bad]!r}, not an object")
    return items


def _unique(values: np.ndarray | list, key: str, fld: str, json_file: str) -> None:
    if len(np.unique(values)) == len(values) if isinstance(values, np.ndarray) else len(set(values)) == len(values):
        return
    seen: dict = {}
    for i, v in enumerate(values.tolist() if isinstance(values, np.ndarray) else values):
        if v in seen:
            raise DatasetFormatError(f"{json_file}: {key}[{i}] has {fld} {v!r}, as {key}[{seen[v]}] does; {key} "
                                     f"{fld}s must be unique")
        seen[v] = i


def _sizes(images: list, json_file: str) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for fld in ("width", "height"):
        values = [im.get(fld) for im in images]
        try:
            arr = np.array(values, dtype=np.float64) if set(map(type, values)) <= {int, float} else None
        except OverflowError:
            arr = None
        if arr is None or not (np.isfinite(arr) & (arr >= 1) & (arr == np.floor(arr)) & (arr <= 2 ** 31)).all():
            i = next(i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, (int, float))
                     or not (1 <= v <= 2 ** 31 and v == int(v)))
            raise DatasetFormatError(f"{json_file}: images[{i}] (id {images[i].get('id')!r}) has {fld} "
                                     f"{values[i]!r}; width and height are positive integers (pixels)")
        out.append(arr)
    return out[0], out[1]


def _flags(anns: list, ann_ids: np.ndarray, json_file: str) -> np.ndarray:
    """iscrowd of each annotation as 0/1 (missing: 0); a value that is not 0, 1 or a bool is refused: the string
    "0" was a crowd region to training (Detectron2 tests `== 0`) and an object to evaluation."""
    values = [a.get("iscrowd", 0) for a in anns]
    if set(values) <= {0, 1} and set(map(type, values)) <= {int, bool}:
        return np.array(values, dtype=np.int64)
    i = next(i for i, v in enumerate(values) if type(v) not in (int, bool) or v not in (0, 1))
    raise DatasetFormatError(f"{json_file}: annotation id {int(ann_ids[i])} (annotations[{i}]) has iscrowd "
                             f"{values[i]!r}; iscrowd is 0 or 1 (a number, not a string)")


def _areas(anns: list, ann_ids: np.ndarray, json_file: str) -> np.ndarray:
    """area of each annotation (NaN where missing); a value that is not a finite number >= 0 is refused."""
    values = [a.get("area") for a in anns]
    types = set(map(type, values))
    if types <= {int, float, type(None)}:
        try:
            arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64) if None in values \
                else np.array(values, dtype=np.float64)
        except OverflowError:
            arr = None
        if arr is not None and not ((arr < 0) | np.isinf(arr)).any() \
                and np.isnan(arr).sum() == sum(v is None for v in values):
            return arr
    for i, v in enumerate(values):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf")):
            raise DatasetFormatError(f"{json_file}: annotation id {int(ann_ids[i])} (annotations[{i}]) has area "
                                     f"{v!r}; an area is a finite number >= 0")
    raise AssertionError("unreachable")


def _image_ids_and_names(images: list, json_file: str) -> tuple[np.ndarray, list[str]]:
    """The images' ids (integers, once each) and file names (non-empty strings)."""
    img_ids = check_ids([im.get("id") for im in images], 0, lambda i: f"images[{i}]", "id", json_file)
    _unique(img_ids, "images", "id", json_file)
    names = [im.get("file_name") for im in images]
    if not set(map(type, names)) <= {str} or not all(names):
        i = next(i for i, n in enumerate(names) if not isinstance(n, str) or not n)
        raise DatasetFormatError(f"{json_file}: images[{i}] (id {int(img_ids[i])}) has file_name {names[i]!r}; a "
                                 "file name is a non-empty string")
    return img_ids, names


def _category_ids(categories: list, json_file: str) -> np.ndarray:
    """The categories' ids (integers, once each), their names non-empty strings, once each."""
    cat_ids = check_ids([c.get("id") for c in categories], 0, lambda i: f"categories[{i}]", "id", json_file)
    _unique(cat_ids, "categories", "id", json_file)
    cat_names = [c.get("name") for c in categories]
    bad = next((i for i, n in enumerate(cat_names) if not isinstance(n, str) or not n.strip()), None)
    if bad is not None:
        raise DatasetFormatError(f"{json_file}: categories[{bad}] (id {int(cat_ids[bad])}) has name "
                                 f"{cat_names[bad]!r}; a category name is a non-empty string")
    _unique(cat_names, "categories", "name", json_file)
    return cat_ids


def _evaluation_boxes(raw: np.ndarray, areas: np.ndarray, changed: np.ndarray, w: np.ndarray,
                      h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xywh, area) of each box as evaluation scores it: the file's own numbers (float64) for every box training
    did not change, clipped to the image where it did (the area in proportion; no area in the file: the box's)."""
    exact = np.concatenate([raw[:, :2], raw[:, :2] + raw[:, 2:]], axis=1)
    eval_xyxy, _, _ = clip_boxes(exact, w, h)
    eval_xywh = np.concatenate([eval_xyxy[:, :2], eval_xyxy[:, 2:] - eval_xyxy[:, :2]], axis=1)
    box_area = raw[:, 2] * raw[:, 3]
    clipped_area = eval_xywh[:, 2] * eval_xywh[:, 3]
    with np.errstate(divide="ignore", invalid="ignore"):  # a clipped box had a positive area (it overlaps)
        eval_area = np.where(changed, areas * clipped_area / box_area, areas)
    return eval_xywh, np.where(np.isnan(eval_area), clipped_area, eval_area)


def _annotation_references(anns: list, img_ids: np.ndarray, cat_ids: np.ndarray, json_file: str) -> tuple:
    """(ids, image ids, the images' sort order, each annotation's image position in it, crowd flags) of the
    annotations: ids from 1 and once each, images and categories listed, no 'ignore' key (pycocotools' overwrite)."""
    ann_ids = check_ids([a.get("id") for a in anns], 1, lambda i: f"annotations[{i}]", "id", json_file,
                        " (the COCO API reads annotation id 0 as 'no match'; faster-coco-eval misreads negative "
                        "ones and ones beyond 2**53)")
    _unique(ann_ids, "annotations", "id", json_file)
    ann_img = check_ids([a.get("image_id") for a in anns], 0, lambda i: f"annotations[{i}]",
                        "image_id", json_file)
    ann_cat = [a.get("category_id") for a in anns]
    ann_cat_arr = check_ids(ann_cat, 0, lambda i: f"annotations[{i}]", "category_id",
                            json_file)
    order = np.argsort(img_ids, kind="stable")
    sorted_ids = img_ids[order]
    img_pos = np.searchsorted(sorted_ids, ann_img)  # sorted position of each annotation's image
    listed = (img_pos < len(sorted_ids)) & (sorted_ids[np.minimum(img_pos, len(sorted_ids) - 1)] == ann_img)
    if not listed.all():
        i = int(np.flatnonzero(~listed)[0])
        raise DatasetFormatError(f"{json_file}: annotation {int(ann_ids[i])} refers to image_id {int(ann_img[i])}, "
                                 "which is not listed under 'images'")
    known = set(cat_ids.tolist())
    if not set(ann_cat_arr.tolist()) <= known:
        i = next(i for i, c in enumerate(ann_cat_arr.tolist()) if c not in known)
        raise DatasetFormatError(f"{json_file}: annotation {int(ann_ids[i])} (image {int(ann_img[i])}) has "
                                 f"category_id {ann_cat[i]}, not among the categories {sorted(known)}")
    crowd = _flags(anns, ann_ids, json_file)
    ignore = [i for i, a in enumerate(anns) if "ignore" in a and not (type(a["ignore"]) in (int, bool)
                                                                      and a["ignore"] == 0)]
    if ignore:
        i = ignore[0]
        raise DatasetFormatError(f"{json_file}: annotation id {int(ann_ids[i])} (annotations[{i}]) has ignore "
                                 f"{anns[i]['ignore']!r}; 'ignore' is not supported (pycocotools overwrites it with "
                                 "iscrowd, so the box would be scored as an object): mark such regions iscrowd 1")
    return ann_ids, ann_img, order, img_pos, crowd


def _kept_annotations(anns: list, keep: np.ndarray, crowd: np.ndarray, area: np.ndarray, xywh: np.ndarray,
                      changed: np.ndarray) -> list[dict]:
    """The annotations training keeps, with the crowd flag and area evaluation reads, and the clipped box where
    training changed it."""
    crowd_list, area_list, xywh_list, changed_list = crowd.tolist(), area.tolist(), xywh.tolist(), changed.tolist()
    kept = []
    for i in np.flatnonzero(keep).tolist():
        a = anns[i]
        a["iscrowd"] = crowd_list[i]
        a["area"] = area_list[i]
        if changed_list[i]:
            a["bbox"] = xywh_list[i]
        kept.append(a)
    return kept


def coco_ground_truth(json_file: str, *, log: bool = True, data: dict | None = None) -> CocoGroundTruth:
    """Read and validate a COCO instances file (one parse, array checks over all annotations): the ground truth
    that training (`load_coco_checked`) and evaluation (evaluation.coco.COCOEvaluator) both use. data: the file as
    read_coco_json parsed it, to spare a second parse of a large file (consumed: its polygons are dropped)."""
    data = read_coco_json(json_file) if data is None else data
    images = _list(data, "images", json_file, required=True)
    categories = _list(data, "categories", json_file, required=True)
    has_annotations = "annotations" in data
    anns = _list(data, "annotations", json_file, required=False)
    for a in anns:  # boxes only: the polygons (half of train2017's json in memory) are freed before anything else
        a.pop("segmentation", None)
    if not categories:
        raise DatasetFormatError(f"{json_file}: no categories; a COCO instances file lists its classes under "
                                 "'categories'")
    if not images:
        raise DatasetFormatError(f"{json_file}: 'images' is empty; a dataset needs at least one image")

    img_ids, names = _image_ids_and_names(images, json_file)
    widths, heights = _sizes(images, json_file)
    cat_ids = _category_ids(categories, json_file)

    ann_ids, ann_img, order, img_pos, crowd = _annotation_references(anns, img_ids, cat_ids, json_file)
    areas = _areas(anns, ann_ids, json_file)
    owner = order[img_pos]  # index into `images` of each annotation's image

    def describe(i: int) -> str:  # the error path only: k-th annotation of its image, as Detectron2 numbers them
        k = int((ann_img[:i] == ann_img[i]).sum())
        return (f"annotation {k} of image {names[owner[i]]} (id {int(ann_img[i])}; annotation id "
                f"{int(ann_ids[i])})")

    raw = boxes_array([a.get("bbox") for a in anns], describe, json_file)
    w, h = widths[owner], heights[owner]
    # COCO's area ranges (all: [0, 1e10]) leave an object out of every score when its area is beyond them: an area
    # of 2e10 on a 43x19 box was trained on and never scored (a detector that missed it had AP 100, 87.62 with its
    # real area). An area is at most its image's or its box's (converters set box w x h, and a full-body box may
    # leave the image), +1 pixel of rasterisation slack.
    bound = np.maximum(w.astype(np.float64) * h, raw[:, 2] * raw[:, 3]) + 1.0
    too_big = np.flatnonzero(areas > bound)
    if too_big.size:
        i = int(too_big[0])
        raise DatasetFormatError(f"{json_file}: {describe(i)} has area {anns[i]['area']!r}, more than its "
                                 f"{int(w[i])}x{int(h[i])} image or its box holds ({bound[i] - 1:.0f} pixels); an "
                                 "area is the object's pixel count (COCO scores by it), or leave it out to use the "
                                 "box's")
    train_xyxy = xywh_to_xyxy(raw)
    train_boxes, keep, changed = clip_boxes(train_xyxy, w, h)
    eval_xywh, eval_area = _evaluation_boxes(raw, areas, changed, w, h)

    kept_anns = _kept_annotations(anns, keep, crowd, eval_area, eval_xywh, changed)
    dataset = {"images": images, "categories": categories}
    if has_annotations:
        dataset["annotations"] = kept_anns
    gt = CocoGroundTruth(json_file, dataset, train_boxes[keep].tolist(), int(changed.sum()), int((~keep).sum()))
    if log:
        examples = [f"{names[owner[i]]}: box {train_xyxy[i].tolist()} in a {int(w[i])}x{int(h[i])} image"
                    for i in np.flatnonzero(~keep)[:5].tolist()]
        log_box_changes(json_file, gt.clipped, gt.dropped, examples)
    return gt


def contiguous_category_ids(category_ids) -> dict[int, int]:
    """The file's category ids -> the model's classes 0..K-1, in id order (as Detectron2's load_coco_json numbers
    them): the one rule for training's records and for mapping predictions back in evaluation."""
    return {c: k for k, c in enumerate(sorted(category_ids))}


def _records(gt: CocoGroundTruth, image_root: str, dataset_name: str | None) -> list[dict]:
    """Detectron2 dataset dicts (images in id order, boxes XYXY_ABS, category ids contiguous), as
    `load_coco_json` builds them, from the validated ground truth; sets the dataset's class metadata."""
    cats = sorted(gt.dataset["categories"], key=lambda c: c["id"])
    id_map = contiguous_category_ids(c["id"] for c in cats)
    if dataset_name is not None:
        meta = MetadataCatalog.get(dataset_name)
        meta.thing_classes = [c["name"] for c in cats]
        meta.thing_dataset_id_to_contiguous_id = id_map
    per_image: dict[int, list] = {im["id"]: [] for im in gt.dataset["images"]}
    for a, box in zip(gt.dataset.get("annotations", []), gt.train_boxes):
        per_image[a["image_id"]].append({"iscrowd": a["iscrowd"], "bbox": box, "category_id": id_map[a["category_id"]],
                                         "bbox_mode": BoxMode.XYXY_ABS})
    return [{"file_name": os.path.join(image_root, im["file_name"]), "height": int(im["height"]),
             "width": int(im["width"]), "image_id": im["id"], "annotations": per_image[im["id"]]}
            for im in sorted(gt.dataset["images"], key=lambda im: im["id"])]


def load_coco_checked(json_file: str, image_root: str, dataset_name: str | None = None, *,
                      data: dict | None = None) -> list[dict]:
    """Training's dataset dicts of a COCO instances file: validated, boxes clipped / dropped (logged), images
    checked to exist. Evaluation reads the same ground truth through `coco_ground_truth` (data: as it takes it)."""
    with bulk_objects():
        dicts = _records(coco_ground_truth(json_file, data=data), image_root, dataset_name)
    logger.info(f"Loaded {len(dicts)} images in COCO format from {json_file}")
    missing = [d["file_name"] for d in dicts if not os.path.isfile(d["file_name"])]
    if missing:
        raise FileNotFoundError(f"{json_file}: {len(missing)} of {len(dicts)} images not found under {image_root}, "
                                f"e.g. {missing[:3]}")
    return dicts


def register_coco(name: str, json_file: str, image_root: str, metadata: dict | None = None) -> None:
    """Register any COCO instances json + image folder under `name` (replacing an earlier registration)."""
    if name in DatasetCatalog.list():
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)
    DatasetCatalog.register(name, lambda: load_coco_checked(json_file, image_root, name))
    MetadataCatalog.get(name).set(json_file=json_file, image_root=image_root, evaluator_type="coco",
                                  **(metadata or {}))

