"""Reading what a run directory says about itself: configuration, evaluation, training log, pretraining.

A detection run is an OUTPUT_DIR of tools/train_det.py (config.yaml, evaluation.json, metrics.json -- Detectron2's
JSONWriter log --, inference/<dataset>/...; runs written before 2026-12-06 are read too, see
run_files.detection_run_files). When its MODEL.WEIGHTS is a classification checkpoint of tools/train_cls.py, the
pretraining run beside that checkpoint (config.json, evaluation.json) is read too, so the report can say how the
backbone was pretrained instead of assuming it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from backbones.bounded_read import MiB, read_tail, regular_file
from classification.engine.run_files import (
    COCO_EVAL,
    CONFIG_JSON,
    CONFIG_YAML,
    FAILURE,
    FINAL_CHECKPOINT,
    INFERENCE_DIR,
    LOG,
    PREDICTIONS,
    RUN_MARKERS,
    VOC_EVAL,
    RunFileError,
    detection_run_files,
    finite_number,
    mixed_layouts,
    read_classification_run,
    read_json,
)

from ..safe_yaml import ConfigFileError, load_yaml

__all__ = ["RunResult", "PretrainInfo", "load_run", "load_pretraining", "is_run_directory", "COCO_COLUMNS",
           "VOC_COLUMNS"]

LOG_LIMIT = 1024 * MiB  # the JSONWriter log: one line per logged iteration
COCO_COLUMNS = ("AP", "AP50", "AP75", "APs", "APm", "APl")
VOC_COLUMNS = ("AP50", "mAP50_voc07", "mAP50_area", "AP", "AP75")


@dataclass
class PretrainInfo:
    """A classification run of tools/train_cls.py (the source of a detector's MODEL.WEIGHTS)."""

    path: str
    model: str = "?"
    width: float = 1.0
    dataset: str = "?"
    image_size: int | None = None
    iterations: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    images_seen: int | None = None
    top1_error: float | None = None  # final, on the val split
    top5_error: float | None = None
    val_images: int | None = None
    seconds: float | None = None
    history: dict = field(default_factory=dict)  # iteration, train_error, test_error, ...


@dataclass
class RunResult:
    name: str
    path: str
    status: str  # "finished", "no metrics (training or crashed)", "crashed (see log.txt)", ...
    backbone: str = "?"
    width: float = 1.0
    weights: str = ""
    pretraining: PretrainInfo | None = None
    seed: int | None = None
    config: dict = field(default_factory=dict)  # config.yaml as written by the run
    arch: str = ""  # "<backbone builder> / <RoI heads>"
    dataset: str = ""  # the evaluated (first test) dataset
    train_datasets: tuple[str, ...] = ()
    kind: str = ""  # "coco" or "voc"
    iterations: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    per_category: dict[str, float] = field(default_factory=dict)
    pr: dict[str, dict] = field(default_factory=dict)  # "iou50"/"iou75" -> {"recall": [...], "precision": [...]}
    train_log: list[dict] = field(default_factory=list)
    dataset_files: dict = field(default_factory=dict)  # json_file / image_root of the evaluated dataset
    conventions: dict = field(default_factory=dict)  # how the evaluator scored (back end, difficult objects)
    gmacs: float | None = None
    # what a model-zoo table reports, each measured by the run itself (detection.engine.trainer)
    train_s_per_iter: float | None = None  # train_seconds_per_iteration
    inference_s_per_image: float | None = None  # the model's forward in eval mode, batch 1, loader excluded
    peak_memory_mb: float | None = None
    memory_measure: str = ""
    parameters: int | None = None
    measured_on: dict = field(default_factory=dict)  # device, threads, processes

    @property
    def init(self) -> str:
        """"pretrained" (MODEL.WEIGHTS given) or "scratch"."""
        return "pretrained" if self.weights else "scratch"

    @property
    def predictions_file(self) -> Path:
        return Path(self.path) / INFERENCE_DIR / self.dataset / PREDICTIONS


def _optional_json(path: Path):
    """A run file the run's numbers do not need: its JSON, or None when absent or unusable (a FIFO, a device,
    not JSON, too large)."""
    try:
        return read_json(path)
    except RunFileError:
        return None


TRAIN_LOG_KEYS = ("iteration", "time", "total_loss", "lr")  # what the report reads of the log (costs, plots)


def _read_train_log(path: Path) -> list[dict]:
    """The JSONWriter log's rows, read a line at a time (a file of at most LOG_LIMIT bytes, a line at most 1 MiB),
    each kept with TRAIN_LOG_KEYS only: the whole file read and split, every row whole, cost ~26x the file's size."""
    last, other = {}, []
    if os.path.lexists(path):
        with open(regular_file(path, limit=LOG_LIMIT), "rb") as f:
            for line in iter(lambda: f.readline(MiB), b""):
                try:
                    row = json.loads(line.decode("utf-8", errors="replace"))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                if not isinstance(row, dict):
                    continue
                kept = {k: row[k] for k in TRAIN_LOG_KEYS if k in row}
                # A resumed run appends from its checkpoint on: the iterations logged after it by the interrupted
                # attempt appear twice. Keep the last record of each iteration, in iteration order.
                if isinstance(kept.get("iteration"), int):
                    last[kept["iteration"]] = kept
                else:
                    other.append(kept)
    return [last[i] for i in sorted(last)] + other


def _summary_from_log(log: Path, dataset: str, max_iter) -> dict | None:
    """A summary (as evaluation.json's) from the last evaluation row of a JSONWriter log -- `bbox/AP`, `bbox/AP50`,
    `bbox/AP-<class>`, ..., as Detectron2's EvalHook writes them -- for a finished run of Detectron2's own tools,
    which write no evaluation.json; None without such a row. The row's iteration is the run's iterations completed
    (an evaluation before the last iteration -- a run killed during its final evaluation, with TEST.EVAL_PERIOD --
    reads as incomplete, not as the final numbers). Read a line at a time, within LOG_LIMIT."""
    last = None
    if not os.path.lexists(log):
        return None
    with open(regular_file(log, limit=LOG_LIMIT), "rb") as f:
        for line in iter(lambda: f.readline(MiB), b""):
            if b'"bbox/' in line:
                try:
                    row = json.loads(line.decode("utf-8", errors="replace"))
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    last = row
    if last is None:
        return None
    bbox = {k[len("bbox/"):]: v for k, v in last.items() if k.startswith("bbox/")}
    it = last.get("iteration")
    final = isinstance(max_iter, int) and isinstance(it, int) and it >= max_iter - 1  # logged at MAX_ITER (- 1)
    return {"evaluation": {dataset: {"bbox": bbox}}, "source": f"{log.name} (Detectron2's log)",
            "iterations_completed": max_iter if final else it}


def _mean_curve(curves: dict[str, list]) -> list[float | None]:
    cols = list(zip(*curves.values())) if curves else []
    out = []
    for col in cols:
        vals = [v for v in col if v is not None]
        out.append(sum(vals) / len(vals) if vals else None)
    return out


def load_pretraining(weights: str) -> PretrainInfo | None:
    """The classification run that wrote `weights` (its config.json and evaluation.json beside it), or None."""
    if not weights or "://" in weights:
        return None
    run = read_classification_run(Path(weights).parent)
    if not run.config or run.top1_error is None:
        return None
    cfg = run.config
    return PretrainInfo(path=str(run.path), model=str(cfg.get("model", "?")),
                        width=float((cfg.get("model_options") or {}).get("width", 1.0)),
                        dataset=str(cfg.get("dataset", "?")), image_size=cfg.get("image_size"),
                        iterations=cfg.get("iterations"), batch_size=cfg.get("batch_size"), lr=cfg.get("lr"),
                        images_seen=run.images_seen, val_images=run.val_images, seconds=run.seconds,
                        history=run.history, top1_error=run.top1_error, top5_error=run.top5_error)


def is_run_directory(path: str | os.PathLike) -> bool:
    """Whether `path` holds a run of either trainer (its config, or any of the files a run leaves), finished or not."""
    return any((Path(path) / f).is_file() for f in (CONFIG_YAML, CONFIG_JSON, *RUN_MARKERS))


def load_run(path: str | os.PathLike, name: str | None = None) -> RunResult:
    """What the run directory says, with a status; a run whose files cannot be used is listed with the reason
    (its numbers are left out) instead of stopping the report of the others."""
    path = Path(path)
    run = RunResult(name=name or path.name, path=str(path), status="no metrics (training or crashed)")
    if not path.is_dir():
        run.status = "missing (no such directory)"
        return run
    if not is_run_directory(path):
        run.status = f"not a run directory (no {CONFIG_YAML}, {CONFIG_JSON}, {', '.join(RUN_MARKERS)})"
        return run
    if not (path / CONFIG_YAML).is_file() and (path / CONFIG_JSON).is_file():
        run.status = ("a classification run (tools/train_cls.py), not a detection run: the report shows it as "
                      "the pretraining of the detectors whose MODEL.WEIGHTS it wrote")
        return run
    try:
        return _load_run(path, run)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as err:  # a field of the wrong type
        return RunResult(name=run.name, path=run.path,
                         status=f"unusable run files ({type(err).__name__}: {str(err)[:160]})")


def _finite_metrics(values: dict, source: str) -> dict[str, float]:
    """Numbers of a run's summary (APs and ARs in percent) as floats; NaN (COCO's "no objects of this size", a class
    without ground truth; written as null since strict_json, as NaN before) is left out as undefined; anything
    else that is not a finite number in [0, 100] is a ValueError naming it (an AP of 150 was reported as a
    finished run's)."""
    out = {}
    for k, v in values.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{source}: {k} is {v!r}, not a number")
        if math.isinf(v):
            raise ValueError(f"{source}: {k} is {v}; an evaluation never gives an infinite AP")
        if not math.isnan(v) and not 0.0 <= v <= 100.0:
            raise ValueError(f"{source}: {k} is {v:g}, outside [0, 100] (a percentage)")
        if not math.isnan(v):
            out[k] = float(v)
    return out


def train_seconds_per_iteration(log: list[dict], iterations: int | None) -> tuple[float | None, str]:
    """Training seconds per iteration from the JSONWriter log's records (Detectron2 logs `time`, the median of the last
    20 iterations, every 20): their mean over iterations 100-500 when the run has 500, else over its middle 80%
    (start-up and the final evaluation left out, as Detectron2's MODEL_ZOO figures). (None, why) without records."""
    timed = [(r["iteration"], r["time"]) for r in log
             if isinstance(r.get("iteration"), int) and isinstance(r.get("time"), (int, float))
             and not isinstance(r.get("time"), bool) and math.isfinite(r["time"])]
    if not timed:
        return None, "no iteration times in the training log"
    last = iterations or max(i for i, _ in timed) + 1
    lo, hi, what = (100, 500, "iterations 100-500") if last >= 500 else (0.1 * last, 0.9 * last, "middle 80%")
    window = [t for i, t in timed if lo <= i + 1 <= hi] or [t for _, t in timed]
    return sum(window) / len(window), f"{what} ({len(window)} logged medians)"


def _read_costs(run: RunResult, metrics: dict) -> None:
    """The model-zoo columns of a run (absent in runs written before they were recorded: left None, never guessed)."""
    run.train_s_per_iter, _ = train_seconds_per_iteration(run.train_log, run.iterations)
    inference = (metrics.get("inference") or {}).get(run.dataset) or {}
    run.inference_s_per_image = finite_number(inference.get("s_per_image")) if isinstance(inference, dict) else None
    train = metrics.get("train") if isinstance(metrics.get("train"), dict) else {}
    run.peak_memory_mb = finite_number(train.get("peak_memory_mb"))
    run.memory_measure = str(train.get("memory_measure", ""))
    params = metrics.get("parameters")
    run.parameters = params if isinstance(params, int) and not isinstance(params, bool) else None
    run.measured_on = metrics.get("measured_on") if isinstance(metrics.get("measured_on"), dict) else {}


def _read_config(run: RunResult) -> None:
    """What the run's config.yaml says it trained: backbone, width, weights (and their pretraining run), seed,
    schedule, datasets."""
    model = run.config.get("MODEL", {}) or {}
    bb = model.get("BACKBONES", {}) or {}
    run.backbone = bb.get("NAME", model.get("BACKBONE", {}).get("NAME", "?"))
    run.width = float(bb.get("WIDTH", 1.0))
    run.weights = str(model.get("WEIGHTS", "") or "")
    run.pretraining = load_pretraining(run.weights)
    seed = run.config.get("SEED")
    run.seed = int(seed) if isinstance(seed, int) and seed >= 0 else None
    run.arch = f"{model.get('BACKBONE', {}).get('NAME', '')} / {model.get('ROI_HEADS', {}).get('NAME', '')}"
    run.iterations = run.config.get("SOLVER", {}).get("MAX_ITER")
    datasets = run.config.get("DATASETS", {}) or {}
    tests = datasets.get("TEST", []) or []
    run.dataset = tests[0] if tests else ""
    run.train_datasets = tuple(datasets.get("TRAIN", []) or [])


def _read_pr_curves(run: RunResult, inference: Path) -> None:
    """The PR curves of the evaluated dataset (COCO's, or VOC's per class on 101 recall thresholds)."""
    coco_eval = _optional_json(inference / COCO_EVAL)  # the PR curves only: an unreadable file loses the curves,
    voc_eval = _optional_json(inference / VOC_EVAL)  # not the run
    if coco_eval and coco_eval.get("precision"):
        rec = coco_eval["recall_thresholds"]
        for key in ("iou50", "iou75"):
            run.pr[key] = {"recall": rec, "precision": _mean_curve(coco_eval["precision"].get(key, {}))}
    elif voc_eval and voc_eval.get("pr_curves_iou50"):
        # VOC curves are per class with their own recall points: interpolate onto 101 recall thresholds.
        rec = [i / 100 for i in range(101)]
        per_class = {}
        for cname, c in voc_eval["pr_curves_iou50"].items():
            per_class[cname] = [max([p for r, p in zip(c["recall"], c["precision"]) if r >= t], default=0.0)
                                for t in rec]
        run.pr["iou50"] = {"recall": rec, "precision": _mean_curve(per_class)}


def _unfinished(path: Path, run: RunResult, metrics: dict, summary: str) -> str | None:
    """Why a run with an evaluation is not a finished one -- an iteration count that is no integer, the trainer's
    record of an exception, fewer iterations than its schedule, no final checkpoint -- or None, with run.iterations
    set to the count completed."""
    failure = _optional_json(path / FAILURE)  # unreadable: still a failure record (its existence says so)
    completed = metrics.get("iterations_completed")
    if completed is not None and (isinstance(completed, bool) or not isinstance(completed, int)):
        return f"unusable {summary} (iterations_completed is {completed!r:.40}, not an integer)"
    if failure is not None or (path / FAILURE).exists():  # the trainer's record of an exception
        failure = failure if isinstance(failure, dict) else {}  # (a summary may exist: the final eval still ran)
        return f"failed at iteration {failure.get('iteration', '?')}: {str(failure.get('error', '?'))[:200]}"
    if completed is not None and (completed != run.iterations or not (path / FINAL_CHECKPOINT).is_file()):
        return (f"incomplete: {completed} of {run.iterations} iterations"
                + ("" if (path / FINAL_CHECKPOINT).is_file() else f", no {FINAL_CHECKPOINT}"))
    if completed is not None:
        run.iterations = completed
    return None


def _load_run(path: Path, run: RunResult) -> RunResult:
    cfg = {}
    if (path / CONFIG_YAML).is_file():
        try:
            cfg = load_yaml(path / CONFIG_YAML) or {}
        except (ConfigFileError, OSError) as err:
            run.status = f"unreadable {CONFIG_YAML} ({str(err).splitlines()[0]})"
            return run
    run.config = cfg if isinstance(cfg, dict) else {}
    _read_config(run)
    if why := mixed_layouts(path):  # read as the old layout, its JSON-lines log was "not JSON (Extra data)"
        run.status = f"unusable run files ({why})"
        return run
    files = detection_run_files(path)
    run.train_log = _read_train_log(files.training_log)
    log = path / LOG
    if os.path.lexists(log) and "Traceback (most recent call last)" in read_tail(log, 20000):
        run.status = "crashed (see log.txt)"
    try:
        metrics = read_json(files.summary)
    except RunFileError as err:  # read_json: None when absent; a ValueError load_run lists for the other files
        run.status = f"unusable {files.summary.name} ({err})"  # not JSON, a FIFO, a device, too large
        return run
    if metrics is None and files.layout == "detectron2" and (path / FINAL_CHECKPOINT).is_file():
        metrics = _summary_from_log(files.training_log, run.dataset, run.iterations)  # Detectron2's own tools
    if not isinstance(metrics, dict) or not isinstance(metrics.get("evaluation"), dict):
        return run
    evaluation = metrics["evaluation"]
    if run.dataset not in evaluation:
        run.dataset = next(iter(evaluation), run.dataset)
    run.dataset_files = (metrics.get("datasets") or {}).get(run.dataset, {})
    _read_costs(run, metrics)
    run.conventions = (metrics.get("conventions") or {}).get(run.dataset, {}) or {}
    bbox = (evaluation.get(run.dataset) or {}).get("bbox", {})
    if not bbox:
        submission = (evaluation.get(run.dataset) or {}).get("submission")
        run.status = (f"submission files written ({int(submission.get('detections', 0))} detections; scored by the "
                      "PASCAL evaluation server, not here)") if submission else "no bbox metrics"
        return run
    if why := _unfinished(path, run, metrics, files.summary.name):
        run.status = why
        return run
    run.status = "finished"
    voc = "mAP50_voc07" in bbox
    run.kind = "voc" if voc else "coco"
    cols = VOC_COLUMNS if voc else COCO_COLUMNS
    run.metrics = _finite_metrics({k: bbox[k] for k in cols if k in bbox}, files.summary.name)
    prefix = "AP50-" if voc else "AP-"
    run.per_category = {k[len(prefix):]: v for k, v in _finite_metrics(
        {k: v for k, v in bbox.items() if k.startswith(prefix)}, files.summary.name).items()}
    _read_pr_curves(run, path / INFERENCE_DIR / run.dataset)
    return run
