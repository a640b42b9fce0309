"""What a detection dataset may contain: the one validation layer that COCO and VOC loading (coco.py, voc.py) and
evaluation (evaluation/coco.py, evaluation/voc.py, which read the loaders' output) share, so training and
evaluation always see the same ground truth.

Refused with a one-line error naming the file and the field: malformed boxes, ids the COCO API misreads (see
`check_ids`), class lists with a repeated name. Boxes beyond the image are clipped to it, empty or negative boxes
are dropped, and both are logged with counts and example files. The checks are array operations over all boxes
at once (a 118k-image COCO file is validated in about a second); the slow per-item path runs only to name the
first bad entry.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import math
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from numbers import Real

import numpy as np
from detectron2.structures import BoxMode

__all__ = ["bulk_objects", "sanitize_boxes", "DatasetFormatError", "dataset_name_problem", "check_class_names",
           "check_ids", "boxes_array", "clip_boxes", "log_box_changes", "MAX_ID"]

logger = logging.getLogger(__name__)

# The largest id every back end reads exactly: JSON readers that hold numbers as doubles (and faster-coco-eval's
# C++ core, measured: 2**63 and 2**64+1 scored perfect detections 75.3 / 62.6) misread larger ones.
MAX_ID = 2 ** 53


@contextlib.contextmanager
def bulk_objects() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a dataset's millions of small dicts and lists are created
    (they hold no cycles): each of its passes walks every live object, torch's included, and took two thirds of
    the time of parsing a COCO json (60 MB: 2.7 s with it, 0.9 s without)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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


def check_class_names(names: Sequence, source: str) -> list[str]:
    """`names` as a list of distinct non-empty strings, or a DatasetFormatError naming `source`. A repeated name
    gives two class indices one label: its ground truth is under the first, every detection of the second is a
    false positive (`--voc-classes cat,cat,dog` scored perfect detections AP50 66.7)."""
    names = list(names)
    seen: dict[str, int] = {}
    normal: dict[str, int] = {}  # NFC form -> position: "café" composed and decomposed print alike
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise DatasetFormatError(f"{source}: class {i} is {name!r}; a class name is a non-empty string")
        if name in seen:
            raise DatasetFormatError(f"{source}: class {name!r} is listed twice (positions {seen[name]} and {i}); "
                                     "each class once")
        if (j := normal.get(unicodedata.normalize("NFC", name))) is not None:
            raise DatasetFormatError(f"{source}: classes {j} and {i} differ only in their Unicode form "
                                     f"({ascii(names[j])} vs {ascii(name)}): they print alike and would be two "
                                     "classes; write them one way")
        seen[name] = i
        normal[unicodedata.normalize("NFC", name)] = i
    if not names:
        raise DatasetFormatError(f"{source}: no classes")
    return names


def _int_column(values: list) -> np.ndarray | None:
    """`values` as int64 if every one is a Python int (not a bool) that fits, else None (the caller then finds
    the first bad one)."""
    if not set(map(type, values)) <= {int}:
        return None
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return None


def check_ids(values: list, lowest: int, describe: Callable[[int], str], field: str, source: str,
              why: str = "") -> np.ndarray:
    """`values` (one id per item) as an int64 array, each an integer in [lowest, MAX_ID]; otherwise a
    DatasetFormatError naming `source`, the item (`describe(i)`) and `field`."""
    arr = _int_column(values)
    if arr is not None and (arr.size == 0 or (arr.min() >= lowest and arr.max() <= MAX_ID)):
        return arr
    for i, v in enumerate(values):  # the error path: name the first bad one
        if isinstance(v, bool) or not isinstance(v, int) or not lowest <= v <= MAX_ID:
            raise DatasetFormatError(f"{source}: {describe(i)} has {field} {v!r}; COCO ids are integers in "
                                     f"[{lowest}, 2**53]{why}")
    raise AssertionError("unreachable")


def _is_number(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, Real):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float range
        return False


def boxes_array(bboxes: list, describe: Callable[[int], str], source: str) -> np.ndarray:
    """`bboxes` (one 4-list per item) as an (N, 4) float64 array, or a DatasetFormatError naming the first box
    that is not 4 finite numbers."""
    if not bboxes:
        return np.zeros((0, 4))
    try:
        ok = (set(map(len, bboxes)) == {4}
              and set(map(type, itertools.chain.from_iterable(bboxes))) <= {int, float})
        arr = np.array(bboxes, dtype=np.float64) if ok else None
    except (TypeError, OverflowError):  # a box that is not a sequence; an int beyond float range
        arr = None
    if arr is not None and np.isfinite(arr).all():
        return arr
    for i, b in enumerate(bboxes):
        if not (isinstance(b, (list, tuple)) and len(b) == 4 and all(_is_number(v) for v in b)):
            raise DatasetFormatError(f"{source}: {describe(i)} has bbox {b!r}; a box is 4 finite numbers")
    raise AssertionError("unreachable")


def xywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """(N, 4) XYWH -> XYXY in float32 arithmetic, rounded as Detectron2's `BoxMode.convert` of a list (a float32
    tensor), returned as float64: the training boxes are bit for bit what the per-box conversion gave."""
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as the tensor gave; clipping bounds it
        b32 = boxes.astype(np.float32)
    return np.concatenate([b32[:, :2], b32[:, :2] + b32[:, 2:]], axis=1).astype(np.float64)


def clip_boxes(xyxy: np.ndarray, widths: np.ndarray, heights: np.ndarray):
    """XYXY boxes clipped to [0, width] x [0, height] of their images -> (clipped, keep, changed): `keep` is False
    for boxes with zero or negative area after clipping, `changed` True for kept boxes that clipping moved."""
    limits = np.stack([widths, heights, widths, heights], axis=1).astype(np.float64)
    clipped = np.minimum(np.maximum(xyxy, 0.0), limits)
    keep = (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
    changed = keep & (clipped != xyxy).any(axis=1)
    return clipped, keep, changed


def log_box_changes(source: str, clipped: int, dropped: int, examples: list[str]) -> None:
    if clipped or dropped:
        logger.warning(f"{source}: {clipped} boxes clipped to their image, {dropped} empty or negative boxes dropped"
                       + (f"; e.g. {'; '.join(examples)}" if examples else ""))


def box_change_examples(xyxy: np.ndarray, keep: np.ndarray, names: Callable[[int], str],
                        sizes: Callable[[int], tuple], limit: int = 5) -> list[str]:
    out = []
    for i in np.flatnonzero(~keep)[:limit]:
        w, h = sizes(int(i))
        out.append(f"{names(int(i))}: box {xyxy[i].tolist()} in a {w}x{h} image")
    return out


def sanitize_boxes(dicts: list[dict], source: str, max_examples: int = 5) -> list[dict]:
    """In place: boxes are converted to absolute XYXY, clipped to [0, width] x [0, height]; boxes with zero or
    negative area (before or after clipping) are dropped. Logs how many of each, with example files. One array
    operation over every box of the dataset."""
    counts = [len(rec.get("annotations") or ()) for rec in dicts]
    anns = [a for rec in dicts for a in (rec.get("annotations") or ())]
    if not anns:
        return dicts
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owner = np.repeat(np.arange(len(dicts)), counts)  # the record of each annotation
    owners = owner.tolist()

    def describe(i: int) -> str:
        rec = dicts[owners[i]]
        return f"annotation {i - int(starts[owners[i]])} of image {rec.get('file_name')} (id {rec.get('image_id')})"

    modes = [a.get("bbox_mode") for a in anns]
    raw = boxes_array([a.get("bbox") for a in anns], describe, source)
    xyxy = np.empty_like(raw)
    for mode in set(modes):
        sel = np.array([m == mode for m in modes])
        if mode == BoxMode.XYXY_ABS:
            xyxy[sel] = raw[sel]
        elif mode == BoxMode.XYWH_ABS:
            xyxy[sel] = xywh_to_xyxy(raw[sel])
        else:
            raise DatasetFormatError(f"{source}: box mode {mode!r} is not supported (absolute XYXY or XYWH)")
    widths = np.repeat(np.array([rec["width"] for rec in dicts], dtype=np.float64), counts)
    heights = np.repeat(np.array([rec["height"] for rec in dicts], dtype=np.float64), counts)
    clipped, keep, changed = clip_boxes(xyxy, widths, heights)
    boxes = clipped.tolist()
    for i in np.flatnonzero(keep).tolist():
        anns[i]["bbox"], anns[i]["bbox_mode"] = boxes[i], BoxMode.XYXY_ABS
    dropped = int((~keep).sum())
    if dropped:
        for r in sorted(set(owner[~keep].tolist())):
            lo = int(starts[r])
            dicts[r]["annotations"] = [a for a, k in zip(anns[lo:lo + counts[r]], keep[lo:lo + counts[r]]) if k]
    examples = box_change_examples(xyxy, keep, lambda i: dicts[owners[i]]["file_name"],
                                   lambda i: (dicts[owners[i]]["width"], dicts[owners[i]]["height"]), max_examples)
    log_box_changes(source, int(changed.sum()), dropped, examples)
    return dicts
