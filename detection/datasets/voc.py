"""PASCAL VOC annotations (Annotations/*.xml, ImageSets/Main/<split>.txt, JPEGImages/) that real files pass.

Accepted as they occur in the wild: float coordinates, missing or empty <difficult>/<truncated>/<pose>, a missing
<size> (then read from the image header), boxes beyond the image border (clipped). Refused with the file named:
malformed XML, an object without <name> or <bndbox>, an unknown class, a missing split file or image.
"""

from __future__ import annotations

import logging
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.structures import BoxMode

from backbones.bounded_read import MiB, UnreadableFile, read_bytes, read_text
from classification.data.images import ImageReadError, image_size

from .validation import check_class_names, sanitize_boxes

__all__ = ["VOC_CLASSES", "VOCFormatError", "parse_voc_xml", "load_voc_instances", "register_voc",
           "discover_voc_classes", "load_voc_images", "register_voc_test_images"]

logger = logging.getLogger(__name__)

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")


class VOCFormatError(ValueError):
    """An annotation file that cannot be read as VOC; the message names the file."""


ANNOTATION_LIMIT = 16 * MiB  # a VOC annotation is 1-3 KB; one with 10,000 objects is ~3 MB
SPLIT_LIMIT = 64 * MiB  # one id per line: millions of images


def _read_annotation(path: str) -> ET.Element:
    """The annotation's root with every tag as its lower-case local name: a default namespace (`<annotation
    xmlns=...>`), a declared prefix (`<v:object>`) or `<Object>` made objects vanish silently (AP50 84 for perfect
    detections). A regular file only (a FIFO blocked training forever), at most ANNOTATION_LIMIT bytes."""
    try:
        root = ET.fromstring(read_bytes(path, limit=ANNOTATION_LIMIT))  # bytes: the parser honours its encoding
    except UnreadableFile as err:
        raise VOCFormatError(str(err)) from None
    except ET.ParseError as err:
        raise VOCFormatError(f"{path}: malformed XML ({err})") from None
    for node in root.iter():
        if isinstance(node.tag, str):
            node.tag = node.tag.rsplit("}", 1)[-1].lower()
    return root


def _objects(node: ET.Element) -> list[ET.Element]:
    """Every <object>, also inside a wrapper element (`<objects><object>`), in document order; not the elements
    inside an <object> (a grouped annotation's members would count twice)."""
    found, stack = [], [iter(node)]  # iterative: a hostile file nests thousands of levels deep
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif child.tag == "object":
            found.append(child)
        else:
            stack.append(iter(child))
    return found


def _text(node: ET.Element | None, tag: str) -> str | None:
    child = node.find(tag) if node is not None else None
    text = child.text.strip() if child is not None and child.text is not None else ""
    return text or None


def _flag(obj: ET.Element, tag: str, path: str, index: int) -> int:
    value = _text(obj, tag)
    if value is None:
        return 0  # missing or empty <difficult/>: not difficult
    try:
        number = float(value)
    except ValueError:
        number = None
    if number not in (0.0, 1.0):  # 0.9 / -1 were read as 0 / 1, inf was an OverflowError
        raise VOCFormatError(f"{path}: <object> #{index} has <{tag}> {value!r}; it must be 0 or 1")
    return int(number)


def parse_voc_xml(path: str, image_path: str | None = None) -> dict:
    """One annotation file -> {"height", "width", "objects": [{"name", "bbox" (1-based xyxy), "difficult",
    "truncated"}]}."""
    root = _read_annotation(path)
    size = root.find("size")
    try:
        height, width = int(float(_text(size, "height") or 0)), int(float(_text(size, "width") or 0))
    except (ValueError, OverflowError):  # "abc", nan; inf
        raise VOCFormatError(f"{path}: <size> has a non-numeric or infinite width/height") from None
    if height <= 0 or width <= 0:  # <size> missing, empty or 0x0: take it from the image itself
        if image_path is None or not os.path.exists(image_path):
            raise VOCFormatError(f"{path}: no usable <size> and image {image_path} not found")
        try:
            width, height = image_size(image_path)
        except ImageReadError as err:
            raise VOCFormatError(f"{path}: no usable <size>, and {err}") from None
    objects = []
    for i, obj in enumerate(_objects(root)):
        name = _text(obj, "name")
        box = obj.find("bndbox")
        if name is None or box is None:
            raise VOCFormatError(f"{path}: <object> #{i} lacks <name> or <bndbox>")
        try:
            bbox = [float(_text(box, k)) for k in ("xmin", "ymin", "xmax", "ymax")]
        except (TypeError, ValueError):
            raise VOCFormatError(f"{path}: <object> #{i} ({name}) has a missing or non-numeric coordinate") from None
        if not all(math.isfinite(v) for v in bbox):
            raise VOCFormatError(f"{path}: <object> #{i} ({name}) has a non-finite coordinate in {bbox}")
        objects.append({"name": name, "bbox": bbox, "difficult": _flag(obj, "difficult", path, i),
                        "truncated": _flag(obj, "truncated", path, i)})
    return {"height": height, "width": width, "objects": objects}


def _read_split(dirname: str, split: str) -> list[str]:
    path = os.path.join(dirname, "ImageSets", "Main", split + ".txt")
    if not os.path.exists(path):  # a dangling symlink too
        raise FileNotFoundError(f"VOC split file not found: {path}")
    try:  # utf-8-sig: a BOM would become part of the first id
        text = read_text(path, limit=SPLIT_LIMIT)
    except UnreadableFile as err:  # a FIFO, a directory; e.g. saved as UTF-16 by an editor
        raise VOCFormatError(f"{err}; a split file lists one image id per line") from None
    ids = [(n, line.split()[0]) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not ids:
        raise VOCFormatError(f"{path}: no image ids (an empty split file)")
    first: dict[str, int] = {}
    for n, fileid in ids:
        if fileid in first:  # listed twice, its ground truth would count twice (AP50 52.4 -> 30.5 measured)
            raise VOCFormatError(f"{path}, line {n}: image id {fileid!r} is listed twice (first on line "
                                 f"{first[fileid]})")
        first[fileid] = n
    return [fileid for _, fileid in ids]


def discover_voc_classes(dirname: str, split: str) -> list[str]:
    """Sorted class names used in a split, for VOC-layout datasets that are not PASCAL VOC itself."""
    names: set[str] = set()
    for fileid in _read_split(dirname, split):
        xml = os.path.join(dirname, "Annotations", fileid + ".xml")
        names.update(n for n in (_text(o, "name") for o in _objects(_read_annotation(xml))) if n)
    return sorted(names)


def load_voc_instances(dirname: str, split: str, class_names: Sequence[str]) -> list[dict]:
    """Detectron2 dataset dicts for one VOC split. Boxes: 1-based inclusive pixels -> 0-based xyxy (as
    Detectron2), clipped to the image; `difficult` kept on each annotation (ignored by training, used by VOC AP)."""
    class_names = check_class_names(class_names, f"VOC {dirname} [{split}]")
    dicts = []
    for fileid in _read_split(dirname, split):
        xml = os.path.join(dirname, "Annotations", fileid + ".xml")
        jpeg = os.path.join(dirname, "JPEGImages", fileid + ".jpg")
        rec = parse_voc_xml(xml, jpeg)
        annotations = []
        for obj in rec["objects"]:
            if obj["name"] not in class_names:
                raise VOCFormatError(f"{xml}: unknown class {obj['name']!r}; classes are {class_names}")
            x0, y0, x1, y1 = obj["bbox"]
            annotations.append({"category_id": class_names.index(obj["name"]), "bbox": [x0 - 1.0, y0 - 1.0, x1, y1],
                                "bbox_mode": BoxMode.XYXY_ABS, "difficult": obj["difficult"]})
        dicts.append({"file_name": jpeg, "image_id": fileid, "height": rec["height"], "width": rec["width"],
                      "annotations": annotations})
    missing = [d["file_name"] for d in dicts if not os.path.isfile(d["file_name"])]
    if missing:  # found now, not when the data loader reaches the image mid-training
        raise FileNotFoundError(f"VOC {dirname} [{split}]: {len(missing)} of {len(dicts)} images not found, e.g. "
                                f"{missing[:3]}")
    return sanitize_boxes(dicts, f"VOC {dirname} [{split}]")


def load_voc_images(dirname: str, split: str) -> list[dict]:
    """Dataset dicts of a split without public annotations (VOC 2012 test): file, id and size only."""
    dicts = []
    for fileid in _read_split(dirname, split):
        jpeg = os.path.join(dirname, "JPEGImages", fileid + ".jpg")
        try:
            width, height = image_size(jpeg)  # the header only: no decoding
        except ImageReadError as err:
            raise VOCFormatError(str(err)) from None
        dicts.append({"file_name": jpeg, "image_id": fileid, "height": height, "width": width})
    return dicts


def register_voc_test_images(name: str, dirname: str, split: str, year: int,
                             class_names: Sequence[str] = VOC_CLASSES) -> None:
    """Register a VOC split without annotations: evaluation writes the official submission files instead of an AP
    (evaluator_type "pascal_voc_submission")."""
    if name in DatasetCatalog.list():
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)
    DatasetCatalog.register(name, lambda: load_voc_images(dirname, split))
    MetadataCatalog.get(name).set(thing_classes=list(class_names), dirname=dirname, year=year, split=split,
                                  evaluator_type="pascal_voc_submission")


def register_voc(name: str, dirname: str, split: str, year: int = 2007,
                 class_names: Sequence[str] | None = None) -> None:
    """Register a VOC-layout directory. class_names=None: a folder named VOC* holds PASCAL VOC's 20 classes when its
    split's annotations name no other (a split naming fewer is said to: the others score 0 in the mean), else the
    classes its annotations name, said so (it was given PASCAL's 20 and stopped on the first other class); any other
    folder: the classes its split's annotations name."""
    if class_names is None:
        found = discover_voc_classes(dirname, split)
        named_voc = os.path.basename(os.path.normpath(dirname)).startswith("VOC")
        if named_voc and set(found) <= set(VOC_CLASSES):
            class_names = VOC_CLASSES
            if len(found) < len(VOC_CLASSES):
                logger.warning(f"{name}: {dirname} [{split}] names {len(found)} of PASCAL VOC's 20 classes; the other "
                               f"{len(VOC_CLASSES) - len(found)} count as AP 0 in the mean (--voc-classes sets the "
                               "classes)")
        else:
            class_names = found
            if named_voc:
                logger.warning(f"{name}: {dirname} is named like PASCAL VOC, but its {split} annotations name other "
                               f"classes: {found} (--voc-classes sets them)")
    class_names = check_class_names(class_names, f"VOC {dirname} [{split}]")
    if name in DatasetCatalog.list():
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)
    DatasetCatalog.register(name, lambda: load_voc_instances(dirname, split, class_names))
    MetadataCatalog.get(name).set(thing_classes=class_names, dirname=dirname, year=year, split=split,
                                  evaluator_type="pascal_voc")
