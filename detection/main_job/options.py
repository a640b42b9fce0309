"""The main job's options (tools/main_job.py --help): the preset, the data and scale, the backbones and their
weights, the schedules, how the stages run; `plan_from_args` turns them into a validated MainJobPlan (one-line
PlanError naming the option otherwise). The job itself: cli.py."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from classification.analysis.degradation import RECIPE

from .arms import ARMS
from .checks import untrained_taps, validate_plan
from .data import COCO, EMBEDDED_TEST_SETS, VOC, DetectData, PretrainData
from .data_scale import DEFAULT_EPOCHS
from .paper_cost import DEFAULT_TFLOPS
from .plan import SCALES, MainJobPlan, PlanError
from .presets import DEFAULT_PRESET, PAPER_SCALE, PRESETS

__all__ = ["build_parser", "plan_from_args"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_job_arguments(ap)
    _add_data_arguments(ap)
    _add_backbone_arguments(ap, MainJobPlan())
    _add_schedule_arguments(ap)
    _add_execution_arguments(ap)
    return ap


def _add_job_arguments(ap: argparse.ArgumentParser) -> None:
    """The preset, where the job writes, and what kind of run it is."""
    ap.add_argument("--preset", choices=sorted(PRESETS), default=DEFAULT_PRESET,
                    help="demo (make demo, default): the paper's FrozenBN arm, one seed per leg (its measured time: "
                         "README.md's `make demo` block); headline (make demo-headline): VGG-16(BN) vs ResNet-101 "
                         "in the paper's setting, 5 pretraining runs each and the control; family (make "
                         "demo-family): six backbones of three families in the paper's setting, 3 pretraining runs "
                         "each, the leaderboard and accuracy vs transfer; degradation (make demo-degradation): the "
                         "degradation experiment alone, 3 seeds; quick (make demo-quick): every arm at smoke scale, "
                         "not converged; paper: VGG-16 vs ResNet-101 on COCO 2014 at paper scale, 5 detection "
                         "seeds each, data under $DETECTRON2_DATASETS (a cluster's job; --dry-run shows it here). "
                         "Each pretrains at 48 px. Options below override "
                         "the preset")
    ap.add_argument("--output-dir", default=None,
                    help="every stage, the report and the summary go here (default: "
                         "output/main_job_<preset>)")
    ap.add_argument("--fresh", action="store_true",
                    help="delete the stages, report and summary this job made under OUTPUT first, then run all")
    ap.add_argument("--rerun-changed", action="store_true",
                    help="when the data changed since OUTPUT's stages were made (refused otherwise, naming what "
                         "changed): delete and rerun only the stages the changed data feeds -- a change in the "
                         "detection data keeps the finished pretraining")
    ap.add_argument("--selection", action="store_true",
                    help="model selection on held-out training data (pretraining: the last 5,000 train items; "
                         "detection: embedded_train_fit -> embedded_train_holdout); never the val split")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the stages and the estimated minutes here, and the GPU-hours the comparison would "
                         "take at the paper's scale (an estimate from mult-adds); run nothing")
    ap.add_argument("--target-mde", type=float, default=2.0, metavar="AP",
                    help="--dry-run: the smallest difference (AP points) the job should resolve; it prints the units "
                         "a group needs for it (default 2: the schedule noise CONVERGENCE.md accepts -- a doubled "
                         "schedule moving AP less than that counts as converged)")
    ap.add_argument("--gpu-tflops", type=float, default=DEFAULT_TFLOPS,
                    help="--dry-run: the sustained TFLOP/s per GPU assumed for the paper-scale estimate "
                         f"(default {DEFAULT_TFLOPS:g}: a guess, printed beside the figure)")


def _add_data_arguments(ap: argparse.ArgumentParser) -> None:
    """What the job pretrains on, what its detectors train and are scored on, and at which scale (data.py)."""
    g = ap.add_argument_group("data and scale (default: the embedded set, generated here, at embedded scale)")
    g.add_argument("--pretrain-data", metavar="DIR", default=None,
                   help="pretrain on an ImageNet-style folder (DIR/train/<class>/*, DIR/val/<class>/*: tools/"
                        "train_cls.py's imagefolder) instead of the embedded composites; a backbone given with "
                        "--weights is not pretrained")
    data = g.add_mutually_exclusive_group()
    data.add_argument("--detect-coco", nargs=4, metavar=("TRAIN_JSON", "TRAIN_IMAGES", "TEST_JSON", "TEST_IMAGES"),
                      default=None, help="train every detection leg on a COCO-format json + image root and score "
                                         "it on another; the classes are the jsons' categories (the same in both)")
    data.add_argument("--detect-voc", nargs=3, metavar=("DIR", "TRAIN_SPLIT", "TEST_SPLIT"), default=None,
                      help="train on a VOC-layout directory's TRAIN_SPLIT (ImageSets/Main/TRAIN_SPLIT.txt) and score "
                           "on its TEST_SPLIT (VOC 07 11-point AP50 and area AP); the classes are the ones the "
                           "train split's annotations name")
    g.add_argument("--detect-coco-train", nargs=2, action="append", default=[], metavar=("JSON", "IMAGES"),
                   help="with --detect-coco: one more train set, concatenated (Detectron2's DATASETS.TRAIN tuple; "
                        "repeatable); its categories must be the others'")
    g.add_argument("--detect-voc-train", nargs=2, action="append", default=[], metavar=("DIR", "SPLIT"),
                   help="with --detect-voc: one more train split, concatenated (repeatable): VOC 07+12 is "
                        "--detect-voc VOC2007 trainval test --detect-voc-train VOC2012 trainval")
    g.add_argument("--scale", choices=SCALES, default=None,
                   help="embedded (default): every leg at smoke scale (128-px images, the job's width and "
                        "iterations) -- what a CPU runs, on any data; data: the paper configs' detector (anchors, "
                        "RoI heads, FrozenBN) at an input size and schedule from your data -- the train images' "
                        "median shorter side up to the configs' 600 (--detect-size), --detect-epochs of the train "
                        "set (--detect-iterations), 2 images a process, lr scaled to that batch; paper: the paper "
                        "configs' schedules, image sizes, batch and lr at full width (configs/COCO-Detection, "
                        "configs/PascalVOC-Detection), linearly scaled to --gpus-per-stage; pretraining with the "
                        "ImageNet recipe (60e4 iterations of 256)")
    g.add_argument("--detect-size", type=int, default=None, metavar="PX",
                   help="--scale data: the legs' shorter side in pixels (the longer one at most 1000/600 of it), "
                        "instead of the train images' median")
    g.add_argument("--detect-epochs", type=float, default=None,
                   help=f"--scale data: passes over the train set (default {DEFAULT_EPOCHS:g}: Detectron2's 1x "
                        "schedule in COCO epochs); --detect-iterations names the iterations instead")
    g.add_argument("--gpus-per-stage", type=int, default=0,
                   help="GPUs each stage trains on, one process each (the tools' --num-gpus; with --slurm, each "
                        "stage job's GPUs per node); 0: one CPU process per stage")
    g.add_argument("--nodes-per-stage", type=int, default=1,
                   help="with --slurm: machines each stage spans (--gpus-per-stage on each; the batch and the "
                        "linear scaling rule count every process)")


def _add_backbone_arguments(ap: argparse.ArgumentParser, d: MainJobPlan) -> None:
    """Which backbones, from which weights, at which width, in which arms."""
    ap.add_argument("--with-plain", action="store_true", help="add plain-101 (pretrained + scratch)")
    ap.add_argument("--backbones", nargs="+", default=None, help=f"default: {' '.join(d.backbones)}")
    ap.add_argument("--weights", action="append", default=[], metavar="MODEL=FILE",
                    help="start MODEL's pretrained legs from FILE (torchvision, timm, Detectron2 .pkl, MSRA-converted "
                         "or this project's checkpoints; read without running pickled code) instead of pretraining "
                         "it here; repeatable. Checked before anything trains")
    ap.add_argument("--weights-top1", action="append", default=[], metavar="MODEL=PERCENT",
                    help="the top-1 accuracy published with MODEL's --weights file (the leaderboard marks it "
                         "'published'); without it: the file's metadata, else measured on the embedded val items")
    ap.add_argument("--width", type=float, default=None,
                    help=f"channel multiplier of every net (default {d.width:g}; a --weights file must have it)")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=None,
                    help="the detection arms (detection/main_job/arms.py; replaces the preset's: "
                         + "; ".join(f"{name}: {' '.join(p['arms']) if 'arms' in p else 'all'}"
                                     for name, p in PRESETS.items() if p.get("arms", True)) + ")")
    ap.add_argument("--allow-unfair-arms", action="store_true",
                    help="run compared arms whose configs differ in keys, or whose starting nets in build options "
                         "(norm groups, width, stride placement, init rules), their factor does not name (the job "
                         "stops naming them otherwise); the report prints the differences")


def _add_schedule_arguments(ap: argparse.ArgumentParser) -> None:
    """Seeds, schedules and the degradation experiment (each overrides the preset)."""
    ap.add_argument("--pretrain-seeds", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", "--detect-seeds", dest="detect_seeds", type=int, nargs="+", default=None,
                    help="detection seeds, nested under every pretraining seed")
    ap.add_argument("--scratch-seeds", type=int, nargs="+", default=None,
                    help="seeds of each from-scratch arm (default: 0; two or more give its comparisons an interval; "
                         "full: 0 1 2)")
    ap.add_argument("--pretrain-epochs", type=float, default=None)
    control = ap.add_mutually_exclusive_group()
    control.add_argument("--control", type=float, default=None, metavar="FRACTION",
                         help="the positive control: the first backbone pretrained again for FRACTION of the budget "
                              "and transferred alike (given by --weights: fine-tuned for FRACTION of the schedule); "
                              "the job calls anything only when it calls this known order (default: 0.5 in the "
                              "full, family and quick presets, none in the others)")
    control.add_argument("--no-control", action="store_true",
                         help="no positive control: the job then makes no call between backbones or arms")
    ap.add_argument("--pretrain-images", type=int, default=None,
                    help="use only the first N training items (default: all)")
    ap.add_argument("--pretrain-val-images", type=int, default=None)
    ap.add_argument("--pretrain-image-size", type=int, default=None, metavar="PX",
                    help="the embedded pretraining's image size (default 48: res5 at 2x2, the smallest size at "
                         "which every kernel tap of the ResNets sees the image; 32 leaves 8 of 9 taps of res5's 3x3 "
                         "convs untrained and is refused; 64 costs 2.9x (ResNet-101) to 4.2x (VGG-16(BN)) the "
                         "32-px step: --dry-run measures it); the degradation nets keep CIFAR's 32")
    ap.add_argument("--allow-untrained-taps", action="store_true",
                    help="pretrain at a --pretrain-image-size whose feature maps leave kernel taps seeing only "
                         "padding (they never train; the refusal names them), e.g. to rerun a 32-px job")
    ap.add_argument("--pretrain-warmup", action="append", default=[], metavar="MODEL=ERROR",
                    help="pretrain MODEL at lr x0.1 until its running training error is below ERROR (a fraction; "
                         "the paper's rule for ResNet-110: 0.8); repeatable; replaces the preset's (family: "
                         "plain34=0.8)")
    ap.add_argument("--detect-iterations", type=int, default=None)
    ap.add_argument("--test-scenes", type=int, choices=sorted(EMBEDDED_TEST_SETS), default=None,
                    help="the embedded scenes the legs are scored on: the 1000 val scenes (default), or their first "
                         "100 (the quick preset's default: smoke scale, where 900 more add ~17 s a leg)")
    ap.add_argument("--with-degradation", dest="degradation", action="store_true", default=None,
                    help="add the degradation experiment (plain / residual CIFAR nets of depth 20 and 56, Figs. 1, "
                         "6, 7; on in the degradation preset)")
    ap.add_argument("--without-degradation", dest="degradation", action="store_false")
    ap.add_argument("--degradation-iterations", type=int, default=None)
    ap.add_argument("--degradation-seeds", type=int, nargs="+", default=None)
    ap.add_argument("--degradation-preact", action=argparse.BooleanOptionalAction, default=None,
                    help="pre-activation units (He et al. 2016) for the four nets (default: --no-degradation-preact, "
                         "the paper's 2015 units)")
    ap.add_argument("--degradation-warmup-fraction", type=float, default=None,
                    help=f"every degradation net's linear warm-up from lr x{RECIPE.warmup_factor:g}, a fraction of "
                         f"the run (default: {RECIPE.warmup_fraction:g}; 0: none)")


def _add_execution_arguments(ap: argparse.ArgumentParser) -> None:
    """How the stages run: here (jobs x threads) or on Slurm."""
    cpus = os.cpu_count() or 1
    ap.add_argument("--jobs", type=int, default=min(2, cpus),
                    help="stages run at once (default: 2 on 2+ cores -- measured faster than one stage with 2 "
                         "threads, tools/benchmark.py main_job)")
    ap.add_argument("--threads", type=int, default=None, help="threads per stage (default: cores / jobs)")
    g = ap.add_argument_group("Slurm (one job per stage, afterok dependencies, the report last)")
    g.add_argument("--slurm", action="store_true", help="submit the stages to Slurm instead of running them here")
    g.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    g.add_argument("--timeout", type=int, default=240, help="minutes per stage job (requeued and resumed after)")
    g.add_argument("--report-only", action="store_true",
                   help="only write the report and summary of finished stages (the last job of --slurm)")


def _warmup(args, base: MainJobPlan, changes: dict) -> tuple[tuple[str, float], ...]:
    """--pretrain-warmup's pairs, else the preset's for the nets this job still pretrains (--backbones may drop
    them, --weights give them)."""
    if args.pretrain_warmup:
        pairs = [_pair("--pretrain-warmup", t) for t in args.pretrain_warmup]
        return tuple((m, _number("--pretrain-warmup", m, v)) for m, v in pairs)
    given = {m for m, _ in changes.get("weights", ())}
    return tuple((m, e) for m, e in base.pretrain_warmup if m in changes["backbones"] and m not in given)


def _check_allowed_untrained_taps(args, plan: MainJobPlan) -> None:
    """--allow-untrained-taps is refused where nothing would be allowed by it (never ignored)."""
    if args.allow_untrained_taps and not (plan.scale == "embedded" and any(
            untrained_taps(plan, m, n) for m in plan.pretrained_here() for n in plan.pretrain_norms() or ["BN"])):
        raise PlanError(f"--allow-untrained-taps: no kernel tap of this job's pretraining sees only padding (it "
                        f"pretrains {', '.join(plan.pretrained_here()) or 'nothing'} at "
                        f"{plan.pretrain_image_size} px, {plan.scale} scale); leave it out")


def _refuse_ignored(args, plan: MainJobPlan) -> None:
    """An option the plan would not use is refused naming it, never ignored."""
    _check_allowed_untrained_taps(args, plan)
    if args.pretrain_image_size is not None and not plan.pretrained_here():
        raise PlanError(f"--pretrain-image-size {args.pretrain_image_size}: this job pretrains no backbone (every one "
                        "from --weights, or none planned); leave it out")
    if args.test_scenes is not None and not plan.detect_data.embedded:
        raise PlanError(f"--test-scenes {args.test_scenes} chooses among the embedded val scenes; your own data's "
                        "test set is the one --detect-coco / --detect-voc names")
    if args.test_scenes is not None and plan.selection:
        raise PlanError(f"--test-scenes {args.test_scenes} chooses among the val scenes; --selection scores the "
                        "held-out training scenes instead")
    if args.control is not None and plan.control_arm() is None:  # there is nothing to control
        raise PlanError(f"--control {args.control:g}: the plan has no pretrained arm of a backbone to control "
                        f"(--arms {' '.join(plan.arms) or '(none)'}); leave it out")


def plan_from_args(args) -> MainJobPlan:
    base = replace(MainJobPlan(), **PRESETS[args.preset])
    backbones = tuple(args.backbones) if args.backbones else base.backbones
    extra = ("plain101",) if args.with_plain and "plain101" not in backbones else ()
    changes = {"backbones": backbones + extra, "selection": args.selection, "scratch": backbones + extra}
    for name, value in (("pretrain_seeds", args.pretrain_seeds), ("detect_seeds", args.detect_seeds),
                        ("pretrain_epochs", args.pretrain_epochs), ("pretrain_train_images", args.pretrain_images),
                        ("pretrain_val_images", args.pretrain_val_images),
                        ("pretrain_image_size", args.pretrain_image_size),
                        ("detect_iterations", args.detect_iterations), ("test_scenes", args.test_scenes),
                        ("degradation_iterations", args.degradation_iterations),
                        ("degradation_seeds", args.degradation_seeds), ("scratch_seeds", args.scratch_seeds),
                        ("degradation_preact", args.degradation_preact),
                        ("degradation_warmup_fraction", args.degradation_warmup_fraction), ("arms", args.arms)):
        if value is not None:
            changes[name] = tuple(value) if isinstance(value, list) else value
    if args.weights:
        changes["weights"] = tuple((m, str(Path(f).expanduser().resolve()))
                                   for m, f in map(lambda t: _pair("--weights", t), args.weights))
    if args.weights_top1:
        changes["weights_top1"] = tuple((m, _number("--weights-top1", m, v))
                                        for m, v in map(lambda t: _pair("--weights-top1", t), args.weights_top1))
    changes["pretrain_warmup"] = _warmup(args, base, changes)
    if args.width is not None:
        changes["width"] = args.width
    if args.no_control or args.control is not None:
        changes["control"] = None if args.no_control else args.control
    if args.degradation is not None:
        changes["degradation"] = PRESETS["degradation"]["degradation"] if args.degradation else ()
    changes["allow_unfair"] = args.allow_unfair_arms
    changes["allow_untrained_taps"] = args.allow_untrained_taps
    changes |= _data_changes(args, base, changes["backbones"])
    if changes["scale"] == "paper":  # the paper configs' schedules and the ImageNet recipe run: never ignored
        given = [o for o, v in (("--detect-iterations", args.detect_iterations),
                                ("--pretrain-epochs", args.pretrain_epochs),
                                ("--pretrain-val-images", args.pretrain_val_images),
                                ("--pretrain-image-size", args.pretrain_image_size),
                                ("--pretrain-warmup", args.pretrain_warmup or None)) if v is not None]
        if given:
            raise PlanError(f"{given[0]}: at --scale paper the paper configs' schedules and the ImageNet recipe "
                            "(60e4 iterations, the whole val split) run; leave it out, or use --scale embedded")
    plan = replace(base, **changes)
    if plan.pretrain_data.folder is not None and not plan.pretrained_here():
        if args.pretrain_data:
            raise PlanError(f"--pretrain-data {args.pretrain_data}: every backbone comes from --weights; nothing "
                            "would pretrain on it")
        plan = replace(plan, pretrain_data=PretrainData())  # the preset's folder, unused: not read, not recorded
    validate_plan(plan)
    _refuse_ignored(args, plan)
    return plan


def _data_changes(args, base: MainJobPlan, backbones: tuple[str, ...]) -> dict:
    """The data, scale and GPUs the options give (paths resolved here: a stage runs in the checkout), over the
    preset's; a preset's own data is under $DETECTRON2_DATASETS (default ./datasets, Detectron2's layout); at
    paper scale the paper's width and pretraining batch unless --width says otherwise."""
    root = Path(os.environ.get("DETECTRON2_DATASETS", "datasets"))
    folder = args.pretrain_data or (root / base.pretrain_data.folder if base.pretrain_data.folder else None)
    changes = {"gpus": args.gpus_per_stage, "nodes": args.nodes_per_stage,
               "pretrain_data": PretrainData(_resolve(folder) if folder else None),
               "detect_data": _under(root, base.detect_data)}
    if args.detect_coco:
        tj, ti, vj, vi = map(_resolve, args.detect_coco)
        extra = tuple((_resolve(j), _resolve(i)) for j, i in args.detect_coco_train)
        changes["detect_data"] = DetectData(COCO, (tj, ti), (vj, vi), extra_train=extra)
    elif args.detect_voc:
        d, train, test = args.detect_voc
        extra = tuple((_resolve(e), split) for e, split in args.detect_voc_train)
        changes["detect_data"] = DetectData(VOC, (_resolve(d), train), (_resolve(d), test), extra_train=extra)
    for option, given, needs in (("--detect-coco-train", args.detect_coco_train, args.detect_coco),
                                 ("--detect-voc-train", args.detect_voc_train, args.detect_voc)):
        if given and not needs:
            raise PlanError(f"{option}: adds a train set to {option[:-6]}'s; give {option[:-6]} too")
    scale = args.scale or base.scale
    changes["scale"] = scale
    if scale == "paper" and base.scale != "paper":
        changes |= PAPER_SCALE
    if scale == "data":
        changes |= _data_scale_changes(args, backbones)
    elif args.detect_size is not None or args.detect_epochs is not None:
        raise PlanError(f"{'--detect-size' if args.detect_size is not None else '--detect-epochs'}: sets the data "
                        f"scale's legs; this job runs at --scale {scale} (give --scale data)")
    if args.width is not None:
        changes["width"] = args.width
    return changes


def _data_scale_changes(args, backbones: tuple[str, ...]) -> dict:
    """--scale data: the size and schedule the options name (else from the data), and full width when every
    pretrained backbone comes from a --weights file (published weights are full width; a net pretrained here is
    at the job's width)."""
    if args.detect_iterations is not None and args.detect_epochs is not None:
        raise PlanError("--detect-epochs and --detect-iterations both set the data scale's schedule; give one")
    for option, value in (("--detect-size", args.detect_size), ("--detect-epochs", args.detect_epochs)):
        if value is not None and not value > 0:
            raise PlanError(f"{option} {value}: must be positive")
    changes = {"detect_size": args.detect_size, "detect_iterations": args.detect_iterations,
               "detect_epochs": args.detect_epochs or DEFAULT_EPOCHS}
    given = {m for m, _ in map(lambda t: _pair("--weights", t), args.weights)}
    if backbones and given >= set(backbones):  # every backbone the job runs (--with-plain's too)
        changes["width"] = 1.0
    return changes


def _resolve(path) -> str:
    return str(Path(path).expanduser().resolve())


def _under(root: Path, data: DetectData) -> DetectData:
    """A preset's detection data with its paths under the datasets root (a VOC split's name is not a path)."""
    if data.embedded:
        return data
    side = (lambda t: (_resolve(root / t[0]), _resolve(root / t[1]))) if data.format == COCO else \
        (lambda t: (_resolve(root / t[0]), t[1]))
    return DetectData(data.format, side(data.train), side(data.test))


def _pair(option: str, text: str) -> tuple[str, str]:
    """MODEL=VALUE of a repeatable option; PlanError naming the option otherwise."""
    model, sep, value = text.partition("=")
    if not sep or not model or not value:
        raise PlanError(f"{option} {text!r}: expected MODEL=VALUE")
    return model, value


def _number(option: str, model: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise PlanError(f"{option} {model}={value}: not a number") from None
    if x != x:  # NaN passes every range check
        raise PlanError(f"{option} {model}={value}: not a number")
    return x


