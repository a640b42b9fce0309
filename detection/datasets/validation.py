"""Box sanity for dataset dicts: refuse malformed boxes, clip boxes to the image, drop empty ones, and say so
(file and counts)."""

from __future__ import annotations

import logging
import math
from numbers import Real

from detectron2.structures import BoxMode

__all__ = ["sanitize_boxes", "DatasetFormatError", "dataset_name_problem"]

logger = logging.getLogger(__name__)


class DatasetFormatError(ValueError):
    """A dataset file that cannot be used; the message names the file (and line/key where known)."""


def dataset_name_problem(name) -> str | None:
    """Why `name` cannot name a dataset, or None. Evaluation writes files named after the dataset under
    OUTPUT_DIR (the converted COCO ground truth): a name with a path separator or '..' would write outside it."""
    if not isinstance(name, str) or not name.strip():
        return "a dataset name is a non-empty string"
    if "/" in name or "\\" in name or name.startswith("."):
        return "a dataset name, not a path: no '/', '\\' or leading '.' (files named after it go under OUTPUT_DIR)"
    return None


def _check_box(bbox, rec: dict, k: int, source: str) -> None:
    ok = isinstance(bbox, (list, tuple)) and len(bbox) == 4 and all(
        isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    if not ok:
        raise DatasetFormatError(f"{source}: annotation {k} of image {rec.get('file_name')} (id "
                                 f"{rec.get('image_id')}) has bbox {bbox!r}; a box is 4 finite numbers")


def sanitize_boxes(dicts: list[dict], source: str, max_examples: int = 5) -> list[dict]:
    """In place: boxes are converted to absolute XYXY, clipped to [0, width] x [0, height]; boxes with zero or
    negative area (before or after clipping) are dropped. Logs how many of each, with example files."""
    clipped, dropped, examples = 0, 0, []
    for rec in dicts:
        h, w = rec["height"], rec["width"]
        kept = []
        for k, ann in enumerate(rec.get("annotations", [])):
            _check_box(ann.get("bbox"), rec, k, source)
            x0, y0, x1, y1 = BoxMode.convert(list(ann["bbox"]), ann["bbox_mode"], BoxMode.XYXY_ABS)
            box = [min(max(x0, 0.0), w), min(max(y0, 0.0), h), min(max(x1, 0.0), w), min(max(y1, 0.0), h)]
            if box[2] <= box[0] or box[3] <= box[1]:
                dropped += 1
                if len(examples) < max_examples:
                    examples.append(f"{rec['file_name']}: box {[x0, y0, x1, y1]} in a {w}x{h} image")
                continue
            if box != [x0, y0, x1, y1]:
                clipped += 1
            kept.append({**ann, "bbox": box, "bbox_mode": BoxMode.XYXY_ABS})
        rec["annotations"] = kept
    if clipped or dropped:
        logger.warning(f"{source}: {clipped} boxes clipped to their image, {dropped} empty or negative boxes dropped"
                       + (f"; e.g. {'; '.join(examples)}" if examples else ""))
    return dicts
