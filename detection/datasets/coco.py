"""COCO-format datasets: Detectron2's loader, with errors that name the file instead of a bare traceback."""

from __future__ import annotations

import json
import os

from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.data.datasets.coco import load_coco_json

from .validation import DatasetFormatError, sanitize_boxes

__all__ = ["DatasetFormatError", "load_coco_checked", "register_coco"]


def _diagnose(json_file: str, err: Exception) -> str:
    """Explain a KeyError of Detectron2's loader from the file itself (read again only on this error path)."""
    try:
        with open(json_file) as f:
            data = json.load(f)
        if not data.get("categories"):
            return "no categories; a COCO instances file lists its classes under 'categories'"
        cats = {c["id"] for c in data.get("categories", [])}
        images = {i["id"] for i in data.get("images", [])}
        for ann in data.get("annotations", []):
            if ann.get("category_id") not in cats:
                return (f"annotation {ann.get('id')} (image {ann.get('image_id')}) has category_id "
                        f"{ann.get('category_id')}, not among the categories {sorted(cats)}")
            if ann.get("image_id") not in images:
                return f"annotation {ann.get('id')} refers to image_id {ann.get('image_id')}, which is not listed"
        for key in ("images", "annotations", "categories"):
            if key not in data:
                return f"no '{key}' list (not a COCO instances file?)"
    except (OSError, json.JSONDecodeError, TypeError, AttributeError):
        pass
    return f"missing key {err}" if isinstance(err, KeyError) else f"cannot be read as COCO ({err})"


def _check_unique_ids(json_file: str) -> None:
    """Ids that must be unique and names that must be distinct: a repeated image id gives one image another's
    boxes, a repeated annotation id is an assertion deep in pycocotools, two categories with one name overwrite
    each other's per-class AP."""
    with open(json_file, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise DatasetFormatError(f"{json_file}: a COCO instances file is a JSON object with images, annotations "
                                 f"and categories, not a {type(data).__name__}")
    # COCO ids are integers: pycocotools' C++ evaluation fails on a string id after the whole inference
    for key, fields in (("images", ("id",)), ("annotations", ("id", "image_id", "category_id")),
                        ("categories", ("id",))):
        for i, item in enumerate(data.get(key) if isinstance(data.get(key), list) else []):
            for field in fields:
                value = item.get(field) if isinstance(item, dict) else None
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                    raise DatasetFormatError(f"{json_file}: {key}[{i}] has {field} {value!r}; COCO ids are "
                                             "integers")
    for key, field in (("images", "id"), ("annotations", "id"), ("categories", "id"), ("categories", "name")):
        items = data.get(key)
        if not isinstance(items, list):
            continue  # _diagnose names a missing list
        seen: dict = {}
        for i, item in enumerate(items):
            value = item.get(field) if isinstance(item, dict) else None
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value in seen:
                raise DatasetFormatError(f"{json_file}: {key}[{i}] has {field} {value!r}, as {key}[{seen[value]}] "
                                         f"does; {key} {field}s must be unique")
            seen.setdefault(value, i)


def load_coco_checked(json_file: str, image_root: str, dataset_name: str | None = None) -> list[dict]:
    """Detectron2's load_coco_json, then box sanity (clip / drop, logged) and a check that images exist."""
    if not os.path.isfile(json_file):
        raise FileNotFoundError(f"COCO annotation file not found: {json_file}")
    try:
        _check_unique_ids(json_file)
        dicts = load_coco_json(json_file, image_root, dataset_name)
    except DatasetFormatError:  # _check_unique_ids' own message already names the entry
        raise
    except json.JSONDecodeError as err:
        raise DatasetFormatError(f"{json_file}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") \
            from None
    except (KeyError, ValueError) as err:  # ValueError: e.g. min() of no categories
        raise DatasetFormatError(f"{json_file}: {_diagnose(json_file, err)}") from None
    except (TypeError, AttributeError) as err:  # e.g. "images" is not a list of objects
        raise DatasetFormatError(f"{json_file}: not a COCO instances file ({type(err).__name__}: {err})") from None
    if dataset_name and not getattr(MetadataCatalog.get(dataset_name), "thing_classes", None):
        raise DatasetFormatError(f"{json_file}: no categories; a COCO instances file lists its classes under "
                                 "'categories'")
    missing = [d["file_name"] for d in dicts if not os.path.isfile(d["file_name"])]
    if missing:
        raise FileNotFoundError(f"{json_file}: {len(missing)} of {len(dicts)} images not found under {image_root}, "
                                f"e.g. {missing[:3]}")
    return sanitize_boxes(dicts, json_file)


def register_coco(name: str, json_file: str, image_root: str, metadata: dict | None = None) -> None:
    """Register any COCO instances json + image folder under `name` (replacing an earlier registration)."""
    if name in DatasetCatalog.list():
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)
    DatasetCatalog.register(name, lambda: load_coco_checked(json_file, image_root, name))
    MetadataCatalog.get(name).set(json_file=json_file, image_root=image_root, evaluator_type="coco",
                                  **(metadata or {}))
