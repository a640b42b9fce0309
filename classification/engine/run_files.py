"""The files a run writes, named once, and the reader of a classification run's record.

Every tool's output directory holds some of these; this module is the only place their names are spelled (as
Detectron2's `Checkpointer` owns `last_checkpoint`). Both trainers, the run-directory rules, the report, the main job,
its comparison and the benchmarks import the names from here. It sits in `classification.engine`, the layer both
pipelines share, because the classification trainer writes these files too; a detection run's record is read one
layer up, by `detection.report.runs.load_run`.

A classification run (tools/train_cls.py): CONFIG_JSON, EVALUATION (its summary: history, final top-1/top-5; METRICS in
runs written before 2026-12-07, when one file name held two formats), checkpoints.
A detection run (tools/train_det.py), in Detectron2's conventions: CONFIG_YAML, METRICS (Detectron2's JSONWriter log:
one JSON object per line with "iteration", the evaluation scalars "bbox/AP", ... as its EvalHook puts them), EVALUATION
({"evaluation": ..., "iterations_completed": ..., costs}), checkpoints, FAILURE when training raised; runs written
before 2026-12-06 hold the summary in METRICS and the log in OLD_TRAINING_LOG (`detection_run_files` tells which).
Both: PROGRESS, LAST_CHECKPOINT, FINAL_CHECKPOINT.
A main-job stage directory adds STAGE_RECORD and STAGE_LOG; the job directory JOB_SUMMARY and JOB_RESULTS.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from backbones import bounded_read
from backbones.bounded_read import MiB, UnreadableFile

__all__ = ["METRICS", "FINAL_CHECKPOINT", "LAST_CHECKPOINT", "PROGRESS", "FAILURE", "CONFIG_JSON", "CONFIG_YAML",
           "EVALUATION", "OLD_TRAINING_LOG", "DetectionRunFiles", "detection_run_files", "run_results_held",
           "is_jsonwriter_log", "log_has_evaluation", "adopt_detectron2_layout", "mixed_layouts", "JOB_DATA",
           "STAGE_RECORD", "STAGE_LOG", "JOB_SUMMARY", "JOB_RESULTS", "RUN_MARKERS", "LOG",
           "INFERENCE_DIR", "PREDICTIONS", "COCO_EVAL", "VOC_EVAL", "CHECKPOINT_GLOB",
           "AUGMENTATION_STREAM", "uses_cached_batches", "earlier_augmentation", "earlier_augmentation_text",
           "checkpoint_name", "read_json", "RunFileError", "ClassificationRun", "read_classification_run",
           "finite_number"]

METRICS = "metrics.json"  # Detectron2's JSONWriter log (a classification run's summary before 2026-12-07)
EVALUATION = "evaluation.json"  # a run's summary: a detection run's results and costs; a classification run's record
FINAL_CHECKPOINT = "model_final.pth"
LAST_CHECKPOINT = "last_checkpoint"  # names the newest complete checkpoint (what --resume loads)
PROGRESS = "progress.json"  # iteration / of how many / seconds, while training
FAILURE = "failure.json"  # a detection run's record that training raised; removed when a resume ends
CONFIG_JSON = "config.json"  # a classification run's ClsConfig
CONFIG_YAML = "config.yaml"  # a detection run's full Detectron2 config
OLD_TRAINING_LOG = "training_log.json"  # the JSONWriter log of detection runs written before 2026-12-06
STAGE_RECORD = "main_job_stage.json"  # a main-job stage: its command, thread count, code versions
STAGE_LOG = "stage.log"  # a main-job stage's stdout + stderr
JOB_SUMMARY = "summary.txt"  # the main job's summary
JOB_RESULTS = "results.json"  # the main job's numbers behind the summary (tools/compare_jobs.py reads it)
JOB_DATA = "main_job_data.json"  # the identity of the data a main job on real data ran on (main_job/data.py)
LOG = "log.txt"  # a detection run's Detectron2 log
INFERENCE_DIR = "inference"  # a detection run's evaluation outputs: inference/<dataset>/...
PREDICTIONS = "coco_instances_results.json"  # the detections COCO AP scored
COCO_EVAL = "coco_eval_bbox.json"  # COCO AP's precision curves
VOC_EVAL = "voc_eval_bbox.json"  # VOC AP's per-class curves
CHECKPOINT_GLOB = "model_[0-9]*.pth"  # the periodic checkpoints (checkpoint_name), zero-padded: sorted by age
RUN_MARKERS = (LAST_CHECKPOINT, FINAL_CHECKPOINT, METRICS, EVALUATION)  # any of them: the directory holds a run
# How the cached embedded path (trainer.cached_batches) draws a batch's crops and flips, as config.json records it
# under "augmentation_stream": runs recorded without it drew per batch, from (seed, the batch's first stream
# position), so each process of a multi-process run drew other crops than one process given the same global batch.
AUGMENTATION_STREAM = "per sample: (seed, stream position)"


def uses_cached_batches(config: dict) -> bool:
    """Whether a classification run's settings train from the cached composites (the path AUGMENTATION_STREAM
    describes)."""
    return config.get("dataset") == "embedded" and config.get("embedded_cache") is True


def earlier_augmentation(config: dict) -> bool:
    """Whether a run with these recorded settings trained on the cached path before its crops and flips were drawn
    per sample (AUGMENTATION_STREAM)."""
    return uses_cached_batches(config) and config.get("augmentation_stream") != AUGMENTATION_STREAM


def earlier_augmentation_text(path) -> str:
    """What a run directory for which earlier_augmentation holds is, in the words of every refusal of it."""
    return (f"{path} was trained before the cached batches drew each sample's crops and flips from its own stream "
            "position (2026-12-05; its config.json records no or another augmentation_stream)")


def checkpoint_name(iteration: int) -> str:
    """A periodic checkpoint's file name (the convention of Detectron2's PeriodicCheckpointer, used by both)."""
    return f"model_{iteration:07d}.pth"


class RunFileError(ValueError):
    """A run file that exists but cannot be used: the message names the file and what is wrong."""


RUN_FILE_LIMIT = 256 * MiB  # a run's JSON files (metrics.json holds the history: kilobytes to a few MB)
ANY_SIZE = 1 << 50  # a file read only in part (its first line)


def read_json(path: Path):
    """A JSON file's value; None when the file does not exist; RunFileError naming it when it is unreadable (not
    JSON, a FIFO or device -- read without blocking or filling memory -- or over RUN_FILE_LIMIT)."""
    if not os.path.lexists(path):
        return None
    try:
        return bounded_read.read_json(path, limit=RUN_FILE_LIMIT)
    except UnreadableFile as err:
        raise RunFileError(str(err)) from None


def run_results_held(path) -> list[str]:
    """The RUN_MARKERS in `path` that a new run would overwrite: checkpoints, EVALUATION, and METRICS unless it is
    Detectron2's JSONWriter log of a detection run killed before its first checkpoint and before any evaluation
    (which a new run starts afresh); a summary -- a classification run's, a detection run's before 2026-12-06 --, a
    log that holds evaluation results ("bbox/AP", ...: a log with results is a result) or an unreadable one is
    held. Any entry that is not a regular file or directory counts too (a FIFO blocked the reader)."""
    path = Path(path)
    return [f for f in RUN_MARKERS if os.path.lexists(path / f) and (
        f != METRICS or not (is_jsonwriter_log(path / f) and not log_has_evaluation(path / f)))]


# The task prefixes of the evaluation scalars Detectron2's EvalHook logs ("bbox/AP", ...); training rows carry other
# "a/b" keys ("fast_rcnn/cls_accuracy", "rpn/num_pos_anchors"), which are not results.
EVALUATION_KEY = re.compile(rb'"(bbox|segm|keypoints|sem_seg|panoptic_seg|box_proposals)/[^"]*"\s*:')


def log_has_evaluation(metrics_file: Path, limit: int = RUN_FILE_LIMIT) -> bool:
    """Whether a JSONWriter log holds evaluation results (a row with an EVALUATION_KEY, as Detectron2's EvalHook
    writes them), read a line at a time (never the whole file at once), at most `limit` bytes read; a log over the
    limit or unreadable counts as holding them (kept, not replaced)."""
    try:
        with open(bounded_read.regular_file(metrics_file, limit=ANY_SIZE), "rb") as f:
            read = 0
            for line in iter(lambda: f.readline(MiB), b""):
                read += len(line)
                if read > limit:
                    return True
                if EVALUATION_KEY.search(line):
                    return True
    except (UnreadableFile, OSError):
        return True
    return False


def is_jsonwriter_log(metrics_file: Path) -> bool:
    """Whether a METRICS file is Detectron2's JSONWriter log: empty (nothing logged yet) or its first line one JSON
    object with an integer "iteration". A summary (pretty-printed JSON), anything unreadable or else is not."""
    try:
        with open(bounded_read.regular_file(metrics_file, limit=ANY_SIZE), "rb") as f:
            first = f.readline(MiB)
    except (UnreadableFile, OSError):
        return False
    if not first.strip():
        return True
    try:
        row = json.loads(first)
    except ValueError:
        return False
    it = row.get("iteration") if isinstance(row, dict) else None
    return isinstance(it, int) and not isinstance(it, bool)


@dataclass(frozen=True)
class DetectionRunFiles:
    """Where a detection run directory keeps its summary and its training log, in either layout."""

    summary: Path  # EVALUATION; METRICS in a run written before 2026-12-06
    training_log: Path  # METRICS (Detectron2's JSONWriter); OLD_TRAINING_LOG before
    layout: str  # "detectron2" or "before 2026-12-06"


def detection_run_files(path) -> DetectionRunFiles:
    """The run's files by layout: Detectron2's when EVALUATION is there, or with neither it nor OLD_TRAINING_LOG when
    METRICS is absent or a JSONWriter log; else the old one (a training run's OLD_TRAINING_LOG, an --eval-only run's
    METRICS summary -- unreadable too, so that the reader names it)."""
    path = Path(path)
    if os.path.lexists(path / EVALUATION) or not os.path.lexists(path / OLD_TRAINING_LOG) and (
            not os.path.lexists(path / METRICS) or is_jsonwriter_log(path / METRICS)):
        return DetectionRunFiles(path / EVALUATION, path / METRICS, "detectron2")
    return DetectionRunFiles(path / METRICS, path / OLD_TRAINING_LOG, "before 2026-12-06")


def mixed_layouts(path) -> str | None:
    """Why a detection run directory holds files of both layouts (an OLD_TRAINING_LOG beside EVALUATION or a
    JSONWriter METRICS), or None: neither reader can tell which files are the run's."""
    path = Path(path)
    if os.path.lexists(path / OLD_TRAINING_LOG) and (os.path.lexists(path / EVALUATION)
                                                     or is_jsonwriter_log(path / METRICS)):
        present = [f for f in (METRICS, EVALUATION, OLD_TRAINING_LOG) if os.path.lexists(path / f)]
        return f"{path} holds files of both run layouts ({', '.join(present)}); move one set away"
    return None


def adopt_detectron2_layout(path) -> None:
    """Move a detection run written before 2026-12-06 into Detectron2's layout before it is trained or evaluated again
    (--resume), so that no directory holds both: its METRICS summary -> EVALUATION, its OLD_TRAINING_LOG -> METRICS
    (Detectron2's JSONWriter then appends to it). Nothing is deleted; RunFileError where both layouts' files exist."""
    path = Path(path)
    if why := mixed_layouts(path):
        raise RunFileError(why)
    if detection_run_files(path).layout == "detectron2":
        return
    for old, new in ((METRICS, EVALUATION), (OLD_TRAINING_LOG, METRICS)):  # summary first: the log takes its name
        if os.path.lexists(path / old):
            os.replace(path / old, path / new)


@dataclass(frozen=True)
class ClassificationRun:
    """What a tools/train_cls.py output directory says about itself."""

    path: Path
    status: str  # "finished", or why not ("no evaluation.json (training or crashed)", "unusable: ...")
    config: dict = field(default_factory=dict)  # config.json (ClsConfig as written)
    top1_error: float | None = None  # %, on its val split, after the last iteration
    top5_error: float | None = None
    history: dict = field(default_factory=dict)  # iteration, train_error, test_error, ...
    seconds: float | None = None
    images_seen: int | None = None
    val_images: int | None = None
    classes: int | None = None  # how many classes its classifier chose among (the summary's list; None: not recorded)

    @property
    def chance_error(self) -> float | None:
        """Top-1 error (%) of a uniform guess among its classes: what a net that never trained scores."""
        return None if not self.classes else 100.0 * (1.0 - 1.0 / self.classes)

    @property
    def earlier_augmentation(self) -> bool:
        """Trained on the cached path before its crops and flips were drawn per sample (AUGMENTATION_STREAM)."""
        return earlier_augmentation(self.config)

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def seed(self) -> int | None:
        s = self.config.get("seed")
        return s if isinstance(s, int) and not isinstance(s, bool) else None


def read_classification_run(path) -> ClassificationRun:
    """The run's record. Finished = a final checkpoint and a finite final top-1 in its summary (EVALUATION; METRICS
    in a run written before 2026-12-07); anything else has a status saying why, and no numbers (a number that could
    be wrong is left out, not guessed)."""
    path = Path(path)
    summary = EVALUATION if os.path.lexists(path / EVALUATION) or not os.path.lexists(path / METRICS) else METRICS
    try:
        cfg, metrics = read_json(path / CONFIG_JSON), read_json(path / summary)
    except RunFileError as err:
        return ClassificationRun(path, f"unusable: {err}")
    cfg = cfg if isinstance(cfg, dict) else {}
    if metrics is None:
        return ClassificationRun(path, f"no {EVALUATION} (training or crashed)", cfg)
    if not isinstance(metrics, dict):
        return ClassificationRun(path, f"unusable: {path / summary} is not a JSON object", cfg)
    final = metrics.get("final")
    top1 = final.get("top1") if isinstance(final, dict) else None
    if isinstance(top1, bool) or not isinstance(top1, (int, float)) or not math.isfinite(top1):
        return ClassificationRun(path, f"no finite final top-1 in {path / summary} (got {top1!r})", cfg)
    top5 = final.get("top5")
    top5_ok = isinstance(top5, (int, float)) and not isinstance(top5, bool) and math.isfinite(top5)
    history = metrics.get("history") if isinstance(metrics.get("history"), dict) else {}
    status = "finished" if (path / FINAL_CHECKPOINT).is_file() else f"no {FINAL_CHECKPOINT}"
    return ClassificationRun(path, status, cfg, 100.0 - float(top1), 100.0 - float(top5) if top5_ok else None,
                             history, finite_number(metrics.get("seconds")), _int(metrics.get("images_seen")),
                             _int(metrics.get("val_images")),
                             len(metrics["classes"]) if isinstance(metrics.get("classes"), list) else None)


def finite_number(v) -> float | None:
    """v as a float when it is a finite number (not a bool), else None: how every run file's number is read."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
