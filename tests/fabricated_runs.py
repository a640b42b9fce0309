"""Fabricated run directories in the formats the tools write, shared by the report tests (detection/) and the
bad-input tests: a detection run with known numbers, a pretraining run, and runs of the repository's paper
configs."""

import json
from pathlib import Path

import yaml

from backbones.weight_formats import KNOWN_META
from classification.engine.run_files import EVALUATION, METRICS, OLD_TRAINING_LOG
from detection import get_detection_cfg
from detection.config import set_conventions
from detection.report.paper import PAPER_SETUP

PAPER_TRAIN = {"coco_2014_val": ["coco_2014_train"], "voc_2007_test": ["voc_2007_trainval", "voc_2012_trainval"]}


def make_run(root: Path, name: str, backbone: str, *, coco=None, voc=None, per_cat=None, log_rows=10,
             dataset=None, train=None, seed=0, width=1.0, weights="", extra_cfg=None, old_layout=False):
    """A fabricated run directory; by default on the paper's splits (COCO 2014 / VOC 07+12 -> 2007 test).
    old_layout: as written before 2026-12-06 (summary in metrics.json, the JSONWriter log in training_log.json)."""
    run = root / name
    run.mkdir(parents=True)
    dataset = dataset or ("voc_2007_test" if voc else "coco_2014_val")
    train = train or PAPER_TRAIN.get(dataset, ["some_train"])
    (run / "config.yaml").write_text(yaml.safe_dump({
        "MODEL": {"BACKBONES": {"NAME": backbone, "WIDTH": width}, "BACKBONE": {"NAME": "build_backbones_trunk"},
                  "ROI_HEADS": {"NAME": "BackbonesRes5ROIHeads"}, "WEIGHTS": weights},
        "SOLVER": {"MAX_ITER": 90000}, "DATASETS": {"TRAIN": train, "TEST": [dataset]}, "SEED": seed,
        "OUTPUT_DIR": str(run), **(extra_cfg or {})}))
    log = [{"iteration": i * 20, "total_loss": 2.0 / (i + 1), "lr": 0.02} for i in range(log_rows)]
    summary, log_file = (METRICS, OLD_TRAINING_LOG) if old_layout else (EVALUATION, METRICS)
    if coco is None and voc is None:
        (run / log_file).write_text("".join(json.dumps(r) + "\n" for r in log))
        return run
    bbox = dict(coco or voc)
    bbox.update({("AP50-" if voc else "AP-") + k: v for k, v in (per_cat or {}).items()})
    completed = ((extra_cfg or {}).get("SOLVER") or {}).get("MAX_ITER", 90000)  # a finished run's MAX_ITER
    log.append({"iteration": completed, **{f"bbox/{k}": v for k, v in bbox.items()}})  # as EvalHook puts them
    (run / log_file).write_text("".join(json.dumps(r) + "\n" for r in log))
    (run / summary).write_text(json.dumps({"evaluation": {dataset: {"bbox": bbox}},
                                           "iterations_completed": completed}))
    (run / "model_final.pth").write_bytes(b"")  # a finished training run has its final checkpoint
    inf = run / "inference" / dataset
    inf.mkdir(parents=True)
    if coco:
        rec = [i / 100 for i in range(101)]
        curve = {c: [max(0.0, 1 - r * 0.9) for r in rec] for c in (per_cat or {"a": 0})}
        (inf / "coco_eval_bbox.json").write_text(json.dumps({
            "recall_thresholds": rec, "precision": {"iou50": curve, "iou75": curve}}))
    return run


COCO_VGG = {"AP": 21.2, "AP50": 41.5, "AP75": 20.0, "APs": 5.0, "APm": 20.0, "APl": 30.0}
COCO_R101 = {"AP": 27.2, "AP50": 48.4, "AP75": 28.0, "APs": 8.0, "APm": 30.0, "APl": 40.0}


def classification_run(root: Path, model="resnet101", width=0.25, top1=59.0) -> Path:
    run = root / f"pretrain_{model}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model": model, "model_options": {"width": width},
                                                 "dataset": "embedded", "image_size": 32, "iterations": 900,
                                                 "batch_size": 64, "lr": 0.1}))
    (run / "metrics.json").write_text(json.dumps({
        "history": {"iteration": [300, 600, 900], "train_error": [80.0, 60.0, 45.0],
                    "test_error": [82.0, 55.0, 100 - top1]},
        "final": {"top1": top1, "top5": 95.0}, "images_seen": 57600, "val_images": 2000, "seconds": 171.0}))
    (run / "model_final.pth").write_bytes(b"")
    return run / "model_final.pth"


PAPER_CONFIGS = {(kind, column): setup["config"] for (kind, column), setup in PAPER_SETUP.items()}
BACKBONE = {"ResNet-101": "resnet101", "VGG-16": "vgg16"}
PAPER_METRICS = {"coco": {"AP": 27.0, "AP50": 48.0, "AP75": 28.0, "APs": 8.0, "APm": 30.0, "APl": 40.0},
                 "voc": {"AP50": 76.0, "mAP50_voc07": 76.0, "mAP50_area": 78.0, "AP": 48.0, "AP75": 50.0}}
SAME_SOLVER = "configs/Overlays/COCO-VGG16-same-solver-as-R101.yaml"


def paper_config(kind: str, column: str, *overlays: str, opts=()) -> dict:
    """config.yaml of a run of the repository's config for that paper column (+ overlays, + opts), as the run
    would record it after loading the column's ImageNet model (its input format, pixel statistics and stride
    placement set, as apply_weights_conventions does; Detectron2's full dump, SEED and OUTPUT_DIR left to the run)."""
    cfg = get_detection_cfg([PAPER_CONFIGS[(kind, column)], *overlays], ["MODEL.DEVICE", "cpu"],
                            freeze=False, read_weights=False)
    set_conventions(cfg, KNOWN_META[PAPER_SETUP[(kind, column)]["weights_format"]])
    cfg.merge_from_list(list(opts))  # after the conventions, as recorded by a run that sets
    #   MODEL.BACKBONES.CONVENTIONS_FROM_WEIGHTS False (otherwise the weights' metadata replaces those keys)
    config = yaml.safe_load(cfg.dump())
    for key in ("SEED", "OUTPUT_DIR"):
        config.pop(key)
    return config


def write_run(root: Path, name: str, config: dict, kind: str, seed: int = 0) -> Path:
    """A finished run directory with that config.yaml and an evaluation.json of `kind`'s metrics."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "SEED": seed, "OUTPUT_DIR": str(run)}))
    dataset = config["DATASETS"]["TEST"][0]
    (run / EVALUATION).write_text(json.dumps({"evaluation": {dataset: {"bbox": PAPER_METRICS[kind]}},
                                              "iterations_completed": config["SOLVER"]["MAX_ITER"]}))
    (run / "model_final.pth").write_bytes(b"")
    return run


# ---- main job directories (tools/compare_jobs.py) ----

def job_stage(job, name, argv, threads, metrics, summary="metrics.json"):
    """A stage directory; a detection leg's summary in evaluation.json (Detectron2's layout, metrics.json its log)
    or, as runs written before 2026-12-06, in metrics.json."""
    d = job / name
    d.mkdir(parents=True)
    (d / "main_job_stage.json").write_text(json.dumps({"argv": argv, "threads": threads}))
    (d / summary).write_text(metrics if isinstance(metrics, str) else json.dumps(metrics))


def main_job_dir(root, repo, threads, *, r101_iters="3200", r101_ap50=90.0, vgg_ap50=95.0, pre_top1=80.0, groups,
         pre_options=("--iterations", "3750"), summary="metrics.json"):
    job = root / "job"
    job_stage(job, "pretrain/resnet101_p0", [f"{repo}/tools/train_cls.py", *pre_options, "--output-dir",
                                          f"{job}/pretrain/resnet101_p0"], threads, {"final": {"top1": pre_top1}})
    for leg, ap50, iters in (("resnet101_p0_d0", r101_ap50, r101_iters), ("vgg16_bn_p0_d0", vgg_ap50, "3200")):
        job_stage(job, f"detect/{leg}", [f"{repo}/tools/train_det.py", "--config-file",
                                      f"{repo}/configs/COCO-Detection/faster_rcnn_R_101_C4.yaml", "MODEL.WEIGHTS",
                                      f"{job}/pretrain/resnet101_p0/model_final.pth", "SOLVER.MAX_ITER", iters],
               threads, {"evaluation": {"embedded_val": {"bbox": {"AP50": ap50, "AP": ap50 / 2, "APl": float("nan")}}}},
               summary)
    deltas = [{"a": "resnet101_pretrained", "b": "vgg16_bn_pretrained", "metric": "AP50", "delta": 0.0}]
    (job / "results.json").write_text(json.dumps({"groups": groups, "deltas": deltas, "pretraining": {}}))
    return job


def job_groups(r101, vgg, sd):
    """results.json's groups: each group's AP50 per pretraining run (two runs of mean m, sd `sd` between them)."""
    def values(m):
        return {"p0": [m + sd / 2 ** 0.5], "p1": [m - sd / 2 ** 0.5]}

    return [{"name": name, "unit": "pretraining run", "values": {"AP50": values(m)}}
            for name, m in (("resnet101_pretrained", r101), ("vgg16_bn_pretrained", vgg))]
