"""The test set's part of a comparison: how far Δ moves when the test images are drawn again.

A comparison's interval (comparison.py) is over its units -- pretraining runs or runs -- all scored on one fixed
test set; a second draw of test images would move every AP, and the part of that which does not cancel between
the two sides moves Δ. `test_set_se` measures it: each run's AP on the same REPLICATES draws of its test images
(evaluation.resampled: a paired bootstrap over the images, COCO's matching and accumulation), Δ recomputed on every
draw with the units fixed (the unit means of each side, as Δ is made), and the standard deviation of those Δ.
It is shown beside the interval, not folded into it: the interval and the call stay the units' (what the job
varies). Part of it -- each run's own luck on these images -- differs between units and is inside the interval
already; the part the runs of a side share is not; adding the two would count the first twice. On the embedded 1000
val scenes it is a third of the seeds' SE or less, on 100 as large as it (CONVERGENCE.md).

Only runs scored with COCO AP whose detections file (inference/<dataset>/coco_instances_results.json) and ground
truth json are present have replicates; a comparison with any run lacking them has no test-set part (None).
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from classification.engine.run_files import RunFileError, read_json

from ..datasets.validation import DatasetFormatError
from ..evaluation.resampled import REPLICATES, RESAMPLED_METRICS, image_draws, image_matches, resampled_ap
from .runs import RunResult

__all__ = ["run_replicates", "image_count", "test_set_se", "test_set_note"]

Replicates = Mapping[str, Sequence[np.ndarray]]  # unit -> the replicate vectors of its runs


def run_replicates(run: RunResult, metric: str) -> np.ndarray | None:
    """The run's `metric` (AP, AP50, AP75) on each draw of its test images; None when it was not scored with COCO
    AP or its detections or ground truth file is absent."""
    draws = _draws(run)
    return None if draws is None or metric not in RESAMPLED_METRICS else draws[1][metric]


def image_count(run: RunResult) -> int | None:
    """The number of test images the run's draws resample (None without draws)."""
    draws = _draws(run)
    return None if draws is None else draws[0]


def _draws(run: RunResult) -> tuple[int, dict[str, np.ndarray]] | None:
    """(images, metric -> values on the draws); None without the files, or when the ground truth found under the
    recorded path is not what the run was scored on (its AP on the undrawn set differs from the recorded AP: e.g.
    a relative path read from another directory)."""
    json_file = (run.dataset_files or {}).get("json_file")
    if run.kind != "coco" or not json_file or "AP" not in run.metrics:
        return None
    try:
        pred, gt = run.predictions_file.stat(), os.stat(json_file)
    except OSError:
        return None
    try:
        images, whole, draws = _replicates(str(run.predictions_file), pred.st_mtime_ns, pred.st_size, json_file,
                                           gt.st_mtime_ns, gt.st_size)
    except (RunFileError, DatasetFormatError, OSError, ValueError, KeyError, TypeError, AssertionError):
        # unreadable or malformed files, or detections of images the ground truth lacks (pycocotools' loadRes
        # asserts): no test-set part; the run's own numbers are read elsewhere
        return None
    return (images, draws) if abs(whole - run.metrics["AP"]) < AP_TOLERANCE else None


AP_TOLERANCE = 1e-6  # the undrawn set's AP against the recorded one (the same arithmetic up to rounding)


@functools.lru_cache(maxsize=256)
def _replicates(predictions: str, _mtime: int, _size: int, json_file: str, gt_mtime: int,
                gt_size: int) -> tuple[int, float, dict[str, np.ndarray]]:
    """(images, AP on the set itself, metric -> its value on each draw), cached per file version (path, mtime,
    size): a report compares one run many times."""
    matches = image_matches(_ground_truth(json_file, gt_mtime, gt_size), read_json(predictions))
    whole = resampled_ap(matches, np.ones((1, len(matches.image_ids))))["AP"][0]
    return len(matches.image_ids), float(whole), resampled_ap(matches, image_draws(len(matches.image_ids)))


@functools.lru_cache(maxsize=8)
def _ground_truth(json_file: str, _mtime: int, _size: int):
    """The ground truth as the run's evaluator scored it (datasets.coco.coco_ground_truth: boxes clipped and
    dropped as training saw them)."""
    from ..datasets.coco import coco_ground_truth
    from ..evaluation.coco import _coco_api

    return _coco_api(coco_ground_truth(json_file, log=False).dataset)


def test_set_se(terms: Sequence[tuple[float, Replicates]]) -> float | None:
    """The standard deviation over the draws of the contrast sum(weight * mean of unit means), each term a group's
    (weight, unit -> its runs' replicate vectors); None when a group has none or the draws differ in number."""
    sides = []
    for weight, units in terms:
        means = [np.mean(np.stack(list(runs)), axis=0) for runs in units.values() if len(runs)]
        if not means:
            return None
        sides.append(weight * np.mean(np.stack(means), axis=0))
    if len({s.shape for s in sides}) != 1:
        return None
    delta = np.sum(np.stack(sides), axis=0)
    delta = delta[np.isfinite(delta)]
    return statistics.stdev(delta.tolist()) if len(delta) > 1 else None


def test_set_note(images: int) -> str:
    """What the test-set SE beside each interval is, for a report's notes."""
    return (f"Beside each interval, the test-set sampling SE: the SD of Δ when the {images} test images are drawn "
            f"again ({REPLICATES} draws with replacement, the same for every run; the units fixed). The part of it "
            "that is each run's own luck on these images differs between units and is already in the interval; "
            "the part every run of a side shares is not. It is the scale of the test set's sampling, shown, not "
            "added: a call whose interval ends several test-set SEs from 0 would survive another draw of images.")
