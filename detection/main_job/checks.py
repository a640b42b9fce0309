"""What the main job checks of a plan before anything runs, each a one-line PlanError naming the option: options
that cannot run together or would count wrongly (`validate_plan`), compared arms whose resolved configs differ
beyond their factor (`check_arms`), and checkpoints the detection legs could not load (`check_pretrained_weights_fit`).
The plan itself and its stages: plan.py; its presets: presets.py."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from backbones import create_model, list_models, model_info
from backbones.geometry import untrained_convs
from classification.analysis.degradation import RECIPE
from classification.engine.config import SEED_LIMIT

from .arms import ARMS, arm_comparisons, unfair_keys
from .data import EMBEDDED_TEST_SETS
from .family import plain_residual_pairs
from .leg_configs import leg_config_files, paper_solver
from .plan import SCALES, MainJobPlan, PlanError

# The smallest pretraining image every detection backbone keeps a feature map at (total stride 32: res5 at 1x1).
MIN_IMAGE_SIZE = 32

__all__ = ["validate_plan", "untrained_taps", "detection_backbones", "arm_differences", "check_pretrained_weights_fit",
           "check_arms", "start_build", "build_differences"]


def _warmup_words(plan: MainJobPlan, model: str) -> str:
    error = plan.warmup_of(model)
    return f"{model} warms up until {error:g}" if error is not None else f"{model} has no warm-up"


def validate_plan(plan: MainJobPlan) -> None:
    """PlanError naming the option for a plan that cannot run or would count wrongly."""
    known = set(list_models())
    for b in plan.backbones:  # the registry says which nets have a detection design (ModelInfo.detection_design)
        if b not in known or model_info(b).detection_design is None:
            raise PlanError(f"--backbones {b!r}: not a model of backbones.list_models() with a detection design "
                            f"({', '.join(detection_backbones())})")
    if len(set(plan.backbones)) != len(plan.backbones):  # one stage directory each: the second would reuse the first
        raise PlanError(f"--backbones lists a backbone twice ({list(plan.backbones)})")
    _validate_weights(plan)
    for a in plan.arms:
        if a not in ARMS:
            raise PlanError(f"--arms {a!r}: not an arm of detection/main_job/arms.py ({', '.join(ARMS)})")
    if len(set(plan.arms)) != len(plan.arms):
        raise PlanError(f"--arms lists an arm twice ({list(plan.arms)})")
    for b in plan.degradation:
        if b not in known or model_info(b).family not in ("cifar_plain", "cifar_resnet"):
            raise PlanError(f"--degradation {b!r}: not a CIFAR plain / ResNet model of backbones.list_models()")
    if plan.degradation and not plan.degradation_iterations > 0:
        raise PlanError(f"--degradation-iterations must be positive, got {plan.degradation_iterations}")
    if plan.degradation and not 0 <= plan.degradation_warmup_fraction <= min(RECIPE.milestones):
        raise PlanError(f"--degradation-warmup-fraction must be in [0, {min(RECIPE.milestones):g}] (the warm-up "
                        f"ends by the first lr cut), got {plan.degradation_warmup_fraction!r}")
    for name in ("pretrain_seeds", "detect_seeds", "scratch_seeds", "degradation_seeds"):
        seeds = getattr(plan, name)
        if len(set(seeds)) != len(seeds):
            raise PlanError(f"--{name.replace('_', '-')} lists a seed twice ({list(seeds)}): n would count one run "
                            "twice")
        if any(s < 0 for s in seeds):
            raise PlanError(f"--{name.replace('_', '-')} must be >= 0")
        if any(s >= SEED_LIMIT for s in seeds):  # numpy's seeds are 32-bit: a stage would fail after the others ran
            raise PlanError(f"--{name.replace('_', '-')} must be < 2**32, got {max(seeds)}")
    for name in ("width", "pretrain_epochs", "detect_iterations", "pretrain_val_images", "detect_epochs"):
        if getattr(plan, name) is None and name == "detect_iterations" and plan.scale == "data":
            continue  # epochs of the train set instead
        if not 0 < getattr(plan, name) < math.inf:
            raise PlanError(f"--{name.replace('_', '-')} must be positive and finite, got {getattr(plan, name)}")
    if plan.test_scenes not in EMBEDDED_TEST_SETS:
        raise PlanError(f"--test-scenes {plan.test_scenes}: the embedded test sets have "
                        f"{' or '.join(map(str, sorted(EMBEDDED_TEST_SETS)))} scenes")
    for model, error in plan.pretrain_warmup:  # never ignored: a net the job does not pretrain would not use it
        if model not in plan.pretrained_here():
            raise PlanError(f"--pretrain-warmup {model}={error:g}: {model} is not pretrained by this job "
                            f"(it pretrains {', '.join(plan.pretrained_here()) or 'nothing'})")
        if not 0 < error < 1:
            raise PlanError(f"--pretrain-warmup {model}={error!r}: the training error is a fraction in (0, 1)")
    for plain, residual in plain_residual_pairs(plan.pretrained_here()):  # the pair the paper compares: one recipe
        if plan.warmup_of(plain) != plan.warmup_of(residual):
            raise PlanError(f"--pretrain-warmup: {_warmup_words(plan, plain)} and {_warmup_words(plan, residual)}, "
                            f"so {residual} vs {plain} would measure the recipe with the shortcuts; give both the "
                            "same rule or neither")
    if not MIN_IMAGE_SIZE <= plan.pretrain_image_size < math.inf:  # the nets' total stride: res5 at 1x1
        raise PlanError(f"--pretrain-image-size must be at least {MIN_IMAGE_SIZE} (every backbone's total stride), "
                        f"got {plan.pretrain_image_size}")
    if plan.pretrain_train_images is not None and not plan.pretrain_train_images > 0:  # 0 was read as "all"
        raise PlanError(f"--pretrain-images must be positive (leave it out for all), got {plan.pretrain_train_images}")
    _validate_data(plan)
    _validate_control(plan)
    _validate_geometry(plan)


@lru_cache(maxsize=64)
def _untrained_by_stage(model: str, options: tuple, size: int) -> tuple[tuple[str, int, int, int], ...]:
    net = create_model(model, num_classes=10, **dict(options))
    stages: dict[str, list[int]] = {}
    for conv in untrained_convs(net, size):
        counts = stages.setdefault(conv.stage, [0, 0, 0])
        counts[0] += 1
        counts[1] += conv.untrained
        counts[2] += conv.untrained_weights
    return tuple((stage, *counts) for stage, counts in stages.items())


def untrained_taps(plan: MainJobPlan, model: str, norm: str = "BN") -> tuple[tuple[str, int, int, int], ...]:
    """(stage, convs, taps, weights) that see only zero padding when `model` pretrains at the plan's image size
    (backbones.geometry): they get no gradient there, and the detector would use them as initialised."""
    options = tuple(sorted(plan.pretrain_options(model, norm).items()))
    return _untrained_by_stage(model, options, plan.pretrain_image_size)


def _validate_geometry(plan: MainJobPlan) -> None:
    """Every kernel tap of a backbone the job pretrains on small images must see the image: a tap that multiplies
    only padding at the pretraining size never trains, yet the detection head runs it on larger maps."""
    if plan.scale == "paper" or plan.allow_untrained_taps:  # paper: 224-px ImageNet crops
        return
    for model in plan.pretrained_here():
        for norm in plan.pretrain_norms() or ["BN"]:
            stages = untrained_taps(plan, model, norm)
            if stages:
                where = ", ".join(f"{s}: {taps} taps of {convs} convs ({weights:,} weights)"
                                  for s, convs, taps, weights in stages)
                raise PlanError(f"--pretrain-image-size {plan.pretrain_image_size}: {model}'s kernel taps that see "
                                f"only padding at that size would never train ({where}); use 48 or more, or "
                                "--allow-untrained-taps to run it anyway")


def _validate_control(plan: MainJobPlan) -> None:
    """The positive control shortens the first backbone's pretraining (or, given its weights, its fine-tuning) to a
    fraction."""
    if plan.control is None:
        return
    if not 0 < plan.control < 1:
        raise PlanError(f"--control must be a fraction of the pretraining budget in (0, 1), got {plan.control!r}")


def _validate_data(plan: MainJobPlan) -> None:
    """The data, the scale and the GPUs go together (the files themselves: data.check_data)."""
    if plan.scale not in SCALES:
        raise PlanError(f"--scale {plan.scale!r}: one of {', '.join(SCALES)}")
    if plan.scale == "paper" and plan.detect_data.embedded:
        raise PlanError("--scale paper: the paper configs train on COCO or VOC; give --detect-coco or --detect-voc")
    if plan.scale == "data" and plan.detect_data.embedded:
        raise PlanError("--scale data sizes the legs from your own detection data; give --detect-coco or "
                        "--detect-voc (the embedded scenes run at --scale embedded)")
    if plan.detect_size is not None and not 32 <= plan.detect_size <= 4000:  # the backbones' stride; a sane cap
        raise PlanError(f"--detect-size {plan.detect_size}: a shorter side in pixels, 32 to 4000")
    if plan.scale == "paper" and plan.pretrain_data.embedded and plan.pretrained_here():
        raise PlanError(f"--scale paper: {', '.join(plan.pretrained_here())} would pretrain on the 32-px embedded "
                        "composites; give --pretrain-data DIR (ImageNet layout) or --weights MODEL=FILE")
    if plan.scale == "paper" and plan.degradation:
        raise PlanError("--with-degradation: the degradation experiment runs on the embedded composites at embedded "
                        "scale; run it as its own job (--preset degradation)")
    if plan.selection and not (plan.detect_data.embedded and plan.pretrain_data.embedded):
        raise PlanError("--selection holds out part of the embedded training data; with your own data, give a "
                        "held-out split as the test set (--detect-coco / --detect-voc) instead")
    if plan.gpus < 0:
        raise PlanError(f"--gpus-per-stage must be >= 0, got {plan.gpus}")
    if plan.nodes < 1:
        raise PlanError(f"--nodes-per-stage must be >= 1, got {plan.nodes}")
    if plan.processes() > 1 and plan.pretrained_here() and plan.pretrain_batch % plan.processes():
        raise PlanError(f"--gpus-per-stage {plan.gpus} --nodes-per-stage {plan.nodes}: the pretraining batch "
                        f"{plan.pretrain_batch} does not split into equal batches over {plan.processes()} processes")
    if plan.processes() > 1 and plan.scale == "embedded":  # else 2 images a process (data: data_scale.py;
        #                                                          paper: Detectron2's linear scaling rule)
        for model in plan.backbones:
            for arm in plan.arms:
                configs = leg_config_files(model, arm=arm, scale=plan.scale, data_format=plan.detect_data.format)
                ims = paper_solver(tuple(configs))[2]
                if ims % plan.processes():  # Detectron2's build_batch_data_loader asserts it when each leg starts
                    raise PlanError(f"--gpus-per-stage {plan.gpus} --nodes-per-stage {plan.nodes}: a detection "
                                    f"leg's batch (SOLVER.IMS_PER_BATCH {ims}, as its configs resolve at "
                                    f"--scale {plan.scale}) does not split over {plan.processes()} processes; "
                                    "Detectron2 would stop every leg at launch, after the pretraining")


def detection_backbones() -> list[str]:
    """The registered backbones a detection leg can be built on (the main job's --backbones choices)."""
    return [m for m in list_models() if model_info(m).detection_design is not None]


def _validate_weights(plan: MainJobPlan) -> None:
    """--weights / --weights-top1 name backbones of the job, once each, with a top-1 accuracy in (1, 100] percent."""
    for option, pairs in (("--weights", plan.weights), ("--weights-top1", plan.weights_top1)):
        models = [m for m, _ in pairs]
        for m in models:
            if m not in plan.backbones:
                raise PlanError(f"{option} {m}=...: {m!r} is not one of --backbones ({' '.join(plan.backbones)})")
        if len(set(models)) != len(models):
            raise PlanError(f"{option} names a backbone twice ({', '.join(models)})")
    for m, top1 in plan.weights_top1:
        if plan.weights_of(m) is None:
            raise PlanError(f"--weights-top1 {m}=...: {m} has no --weights file (its top-1 is measured here)")
        if not 1.0 < top1 <= 100.0:  # at most 1: below any classifier worth transferring, written as a fraction
            raise PlanError(f"--weights-top1 {m}={top1:g}: a top-1 accuracy in percent, above 1 and at most 100"
                            + (f" ({top1:g} looks like a fraction: {100 * top1:g}?)" if 0.0 < top1 <= 1.0 else ""))
    for m, f in plan.weights:
        if not Path(f).is_file():
            what = ("a directory" if Path(f).is_dir() else "not a regular file (a FIFO, socket or device)"
                    if Path(f).exists() else "no such file")
            raise PlanError(f"--weights {m}={f}: {what}; a weights file is one regular file")


def arm_differences(plan: MainJobPlan, model: str) -> dict[tuple[str, str], dict[str, list]]:
    """(arm a, arm b) -> the config keys whose values differ between the two arms' legs of `model`, read from the
    resolved configs the stages would train with (Detectron2's defaults, the config files, the command line;
    the weights are not read: they do not exist before the job). SEED and OUTPUT_DIR aside."""
    from ..config import get_detection_cfg
    from ..report.groups import config_differences

    probe = Path("<job>")  # the legs' own paths: only whether MODEL.WEIGHTS is set matters to the diff
    resolved = {}
    out = {}
    for comparison in arm_comparisons(plan.arms):
        for arm in (comparison.a, comparison.b):
            if arm not in resolved:
                weights = probe / "pretrain" / "weights.pth" if ARMS[arm].pretrained else None
                files, opts = plan.detect_config(model, arm, weights, 0, probe / "detect" / arm)
                resolved[arm] = get_detection_cfg(files, opts, read_weights=False)
        out[(comparison.a, comparison.b)] = config_differences(resolved[comparison.a], resolved[comparison.b])
    return out


def check_pretrained_weights_fit(plan: MainJobPlan) -> None:
    """Stop (PlanError) before anything trains when weights would not load into the detection legs that start from
    them (a VGG-16 job once pretrained with GN and failed at its first detection leg, 25 minutes in): a file given
    with --weights is read (safely: no pickled code runs) and loaded as it is; for a pretraining stage, its net is
    built as the stage builds it, saved as train_cls saves it. Either is loaded strictly, classifier aside, into the
    `backbones` model its detection config builds. Seconds a backbone at width 0.25."""
    import tempfile

    from backbones import create_model, save_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        for model in plan.backbones:
            for arm in (ARMS[a] for a in plan.arms if ARMS[a].pretrained):
                given = plan.weights_of(model)
                if given is not None:
                    what = f"--weights {model}={given}"
                    weights = given
                else:
                    what = f"{model}: the {arm.pretrain_norm} pretraining net"
                    net = create_model(model, num_classes=10, **plan.pretrain_options(model, arm.pretrain_norm))
                    weights = save_pretrained(net, Path(tmp) / f"{model}_{arm.name}.pth")
                _check_fit(plan, model, arm.name, weights, what, Path(tmp))


def _check_fit(plan: MainJobPlan, model: str, arm: str, weights: Path, what: str, tmp: Path) -> None:
    """Load `weights` as the arm's detection legs will (their resolved config, the weights' conventions applied);
    PlanError naming the keys or the reason, one line."""
    from backbones import IncompatibleWeightsError, load_pretrained
    from backbones.checkpoint_io import CheckpointReadError
    from backbones.pretrained import read_weights_file
    from backbones.weight_formats import FormatError, MetadataError

    from ..config import get_detection_cfg
    from ..modeling.backbone import backbone_spec_from_cfg

    files, opts = plan.detect_config(model, arm, weights, 0, tmp)
    try:
        arch = read_weights_file(weights).meta.arch
    except (CheckpointReadError, FormatError, MetadataError, ValueError, OSError) as err:
        raise PlanError(f"{what}: {err}") from None
    if arch.get("family") and float(arch.get("width", 1.0)) != plan.width:  # the job's option in the hint, not
        theirs = float(arch.get("width", 1.0))  # the legs' MODEL.BACKBONES.WIDTH
        raise PlanError(f"{what} holds a net of width {theirs:g}; the job builds width {plan.width:g} (--width "
                        f"{theirs:g} builds the net it was trained as)")
    try:
        target = backbone_spec_from_cfg(get_detection_cfg(files, opts)).build()
        load_pretrained(target, weights, strict=True, drop_classifier=True)
    except IncompatibleWeightsError as err:
        r = err.report
        misfits = [f"{title} ({len(keys)}): {', '.join(map(str, keys[:2]))}"
                   for title, keys in (("unexpected in checkpoint", r.unexpected), ("missing", r.missing),
                                       ("other shapes", [f"{k} {tuple(a)} vs {tuple(b)}" for k, a, b, *_
                                                         in r.shape_mismatch]),
                                       ("other options", r.option_mismatches),
                                       ("unusable values", r.bad_values)) if keys]
        hint = " (--width sets the width the job builds its nets at)" if r.shape_mismatch else ""
        raise PlanError(f"{what} does not load into the detection legs of arm {arm} (width {plan.width:g}): "
                        f"{'; '.join(misfits)}{hint}") from None
    except (CheckpointReadError, FormatError, MetadataError, ValueError, OSError) as err:
        raise PlanError(f"{what}: {err}") from None


def start_build(plan: MainJobPlan, model: str, arm: str) -> dict | None:
    """The build of the net an arm's legs of `model` start from, as the net records it (`arch`: family, depth,
    norm and its groups, width, stride placement, shortcuts) with its init rule: the pretraining stage's net for a
    pretrained arm, the leg's own detection net from scratch; None for weights given in a file (not built here:
    check_pretrained_weights_fit loads them, their conventions compared)."""
    from backbones import create_model

    from ..config import get_detection_cfg
    from ..modeling.backbone import backbone_spec_from_cfg

    if ARMS[arm].pretrained:
        if plan.weights_of(model) is not None:
            return None
        options = plan.pretrain_options(model, ARMS[arm].pretrain_norm)
        net = create_model(model, **options)
    else:
        probe = Path("<job>")
        files, opts = plan.detect_config(model, arm, None, 0, probe / "detect" / arm)
        spec = backbone_spec_from_cfg(get_detection_cfg(files, opts, read_weights=False))
        options, net = spec.options, spec.build()
    return {**net.arch, "zero_init_residual": bool(options.get("zero_init_residual", False))}


def build_differences(plan: MainJobPlan, model: str) -> dict[tuple[str, str], dict[str, list]]:
    """(arm a, arm b) -> the options of start_build that differ between the two arms' nets of `model` (none where
    an arm starts from a given file)."""
    compared = arm_comparisons(plan.arms)
    builds = {arm: start_build(plan, model, arm) for c in compared for arm in (c.a, c.b)}
    out = {}
    for c in compared:
        ba, bb = builds[c.a], builds[c.b]
        out[(c.a, c.b)] = {} if ba is None or bb is None else {
            k: [ba.get(k), bb.get(k)] for k in sorted(ba.keys() | bb.keys()) if ba.get(k) != bb.get(k)}
    return out


def check_arms(plan: MainJobPlan) -> list[str]:
    """Stop (PlanError) before anything trains when two compared arms' configs differ in a key their factor does not
    name, or the nets their legs start from in a build option it does not name (start_build), naming them; with
    plan.allow_unfair the differences are returned for the report to print instead."""
    overridden = []
    for model in plan.backbones:
        builds = build_differences(plan, model)
        for (a, b), differences in arm_differences(plan, model).items():
            comparison = next(c for c in arm_comparisons(plan.arms) if (c.a, c.b) == (a, b))
            options = {k: v for k, v in builds[(a, b)].items() if k not in comparison.allowed_build}
            extra = unfair_keys(differences, comparison)
            if not extra and not options:
                continue
            keys = ", ".join([f"{k} ({differences[k][0]} vs {differences[k][1]})" for k in extra] + [
                f"the backbone build option {k} ({va} vs {vb})" for k, (va, vb) in options.items()])
            text = f"{model}: arms {a} and {b} differ in {keys}, beyond their factor ({comparison.factor})"
            if not plan.allow_unfair:
                raise PlanError(f"{text}: an unfair comparison; make the configs agree, or pass --allow-unfair-arms "
                                "and the report prints this")
            overridden.append(text)
    return overridden
