"""What the main job runs: the plan (backbones, widths, schedules, seeds) and the stages it makes (its presets:
presets.py).

The paper's experiment (Tables 7/8) in miniature:
1. the embedded detection dataset (scenes of Fashion-MNIST objects; val scenes use test-split objects only);
2. ImageNet-style pretraining of VGG-16 (BN variant) and ResNet-101 at reduced width with tools/train_cls.py on
   the Fashion-MNIST *train* items composited on random backgrounds, one recipe for both, several pretraining seeds;
3. Faster R-CNN with each pretrained backbone (the paper's C4 design for ResNet, py-faster-rcnn's fc6/fc7 head for
   VGG), detection seeds nested under each pretraining seed, and from-scratch controls, all with tools/train_det.py,
   in the arms of detection/main_job/arms.py: like-for-like GN pretrained vs GN from scratch (at the same and at 3x
   the schedule), and the paper's setting (BN pretrained, frozen in detection) as a named secondary arm. A plan
   whose compared arms differ in a config key their factor does not name stops before training (`check_arms`).
`selection=True` is the model-selection variant: pretraining scored on held-out train items and detection trained
on `embedded_train_fit`, scored on `embedded_train_holdout` -- schedules are chosen there, never on the val split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from backbones import model_info
from classification.analysis.degradation import RECIPE
from classification.engine.run_files import FINAL_CHECKPOINT

from ..project import project_files
from .arms import ARMS
from .data import EMBEDDED_VAL_SCENES, DetectData, PretrainData, embedded_sets, folder_train_images
from .data_scale import DEFAULT_EPOCHS, DataScale, data_scale, data_scale_overrides
from .leg_configs import PAPER_IMAGES_PER_GPU, leg_config_files, paper_settings, paper_solver

__all__ = ["MainJobPlan", "Stage", "plan_stages", "PlanError",
           "SCALES", "pretrain_dir", "pretraining_label", "control_label"]

# The scales a job runs at. embedded: every leg at smoke scale (configs/Embedded-Detection/smoke.yaml: 128-px
# images, nets at the job's width, the job's iteration count) -- what 2 CPU cores can run, on any data; data: the
# paper configs' detector at an input size and schedule from the user's data (data_scale.py); paper: the paper
# configs as they are (their schedule, image sizes, batch and lr, full width), the linear scaling rule applied to
# the GPUs a stage gets (Detectron2's SOLVER.REFERENCE_WORLD_SIZE), pretraining with the ImageNet recipe.
SCALES = ("embedded", "data", "paper")


class PlanError(ValueError):
    """A plan that cannot run: the message names the option."""


def init_options(model: str) -> dict:
    """The initialisation rule of a backbone's nets in the main job, its pretraining and its from-scratch legs alike
    (an arm's factor is never the init): Goyal et al.'s zero-init residual for the residual nets the registry marks
    -- each block starts as the identity; without it ResNet-101 at width 0.25 stays at chance in pretraining."""
    return {"zero_init_residual": True} if model_info(model).zero_init_residual else {}


def _model_option_args(options: dict) -> list[str]:
    """A stage's model options as train_cls.py's arguments: --model-option KEY=VALUE each."""
    return [a for k, v in options.items() for a in ("--model-option", f"{k}={v}")]


def _trainer_option_args(options: dict) -> list[str]:
    """tools/train_cls.py's flags for ClsConfig fields (a tuple: its values after the flag)."""
    out = []
    for key, value in options.items():
        out += [f"--{key.replace('_', '-')}", *(map(str, value) if isinstance(value, tuple) else [str(value)])]
    return out


@dataclass(frozen=True)
class MainJobPlan:
    """What the main job runs, with the schedules CONVERGENCE.md measured on held-out training data: the detection
    legs are converged there (doubling 3200 iterations moved AP50 by less than 2 points), and so is pretraining at
    32 epochs (the shortest one recipe with which doubling moves neither net's top-1 error by 2 points)."""

    backbones: tuple[str, ...] = ("vgg16_bn", "resnet101")  # the mission's pair (VGG-16 in its BN variant)
    width: float = 0.25  # channel multiplier of every net (backbones.width); 1.0 is not pretrainable here
    pretrain_image_size: int = 48  # Fashion-MNIST items on 48x48 backgrounds: res4 at 3x3, res5 at 2x2, where every
    #                                kernel tap sees the image (at 32 px res5 runs at 1x1 and 8 of 9 taps of its 3x3
    #                                convs never train: checks._validate_geometry refuses it)
    allow_untrained_taps: bool = False  # pretrain at a size that leaves kernel taps untrained (the 32-px results)
    pretrain_epochs: float = 32.0  # passes over the training items; held-out error: 16 -> 32 moved ResNet-101 by
    #                                1.9 points, 32 -> 64 VGG-16(BN) by 1.3 (16 -> 32: 2.6; CONVERGENCE.md)
    pretrain_batch: int = 128  # fills 2 cores (tools/benchmark.py main_job section); the global batch: a stage
    #                            with `gpus` processes gives each pretrain_batch / gpus (train_cls's batch is each's)
    pretrain_seeds: tuple[int, ...] = (0, 1)  # initialisation, data order and augmentation of the pretraining
    pretrain_val_images: int = 2000  # the first 2,000 Fashion-MNIST test items, composited
    pretrain_train_images: int | None = None  # None: all training items (60,000 for Fashion-MNIST)
    pretrain_holdout: int = 5000  # selection=True: the last N train items are the val set instead
    pretrain_warmup: tuple[tuple[str, float], ...] = ()  # (backbone, error): its pretraining at lr x0.1 until the
    #   running training error is below `error` (at least 20 iterations either way): the paper's rule for the one
    #   net of its that did not start, ResNet-110 (Sec. 4.2: 0.01 until the error is below 80%); the family preset
    #   gives it to plain-34, which never leaves chance at lr 0.1 from its first iterations (CONVERGENCE.md)
    detect_iterations: int | None = 3200  # of 2 images, lr x0.1 for the last 20%; 1600 -> 3200 moved ResNet-101 +5.9
    #                                AP50 on the held-out training scenes, 3200 -> 6400 +0.3 (CONVERGENCE.md);
    #                                None at the data scale: detect_epochs of the train set
    detect_seeds: tuple[int, ...] = (0, 1)  # nested under every pretraining seed
    arms: tuple[str, ...] = tuple(ARMS)  # arms.ARMS: like-for-like GN (pretrained, scratch; 1x, 3x), the paper's
    scratch: tuple[str, ...] = ("vgg16_bn", "resnet101")  # backbones with from-scratch arms
    scratch_seeds: tuple[int, ...] = (0,)  # their seeds: two or more give the scratch arms' comparisons an interval
    allow_unfair: bool = False  # run compared arms whose configs differ beyond their factor (the report says so)
    # Weights brought to the job (--weights MODEL=FILE): that backbone has no pretraining stage, its pretrained arms'
    # legs start from the file (one unit: the file); its top-1 from weights_top1 (published), else the file's own
    # metadata, else measured on the embedded val items when its classifier has their classes.
    weights: tuple[tuple[str, str], ...] = ()
    weights_top1: tuple[tuple[str, float], ...] = ()  # (backbone, top-1 accuracy %) as published with the file
    selection: bool = False  # the model-selection variant (held-out training data; see the module docstring)
    test_scenes: int = EMBEDDED_VAL_SCENES  # the embedded legs' test set: the 1000 val scenes, or their first 100
    #   (smoke scale: data.EMBEDDED_TEST_SETS)
    # The data (data.py): what pretraining reads (the embedded composites, or an ImageNet-style folder) and what the
    # detection legs train and are scored on (the embedded scenes, a COCO json + images, a VOC split); the scale
    # their configs run at (SCALES), and the GPUs each stage gets (0: CPU processes).
    pretrain_data: PretrainData = PretrainData()
    detect_data: DetectData = DetectData()
    scale: str = "embedded"
    detect_size: int | None = None  # the data scale's shorter side (--detect-size); None: from the train images
    detect_epochs: float = DEFAULT_EPOCHS  # the data scale's schedule without --detect-iterations
    gpus: int = 0
    nodes: int = 1  # machines a stage spans (Slurm), `gpus` processes on each (one CPU process without GPUs)
    # The degradation problem in miniature (paper Figs. 1, 6, 7): plain and residual CIFAR-style nets of two depths,
    # one budget, on the same cached composites as the pretraining; () leaves it out.
    degradation: tuple[str, ...] = ()
    degradation_iterations: int = RECIPE.iterations  # of 128 images at lr 0.1, x0.1 at 50% and 75% (classification.
    #   analysis.degradation.RECIPE, shared with tools/degradation.py: past the 56-layer nets' early plateau)
    degradation_seeds: tuple[int, ...] = (0, 1, 2)  # seeds are the units of its comparisons (>= 3: with 2 per net
    #   Welch's t had 1-2 degrees of freedom and plain-56 at chance vs plain-20 at 62 +- 9% made no call)
    degradation_preact: bool = RECIPE.preact  # the paper's 2015 units for all four nets by default; True:
    #   pre-activation units (He et al. 2016); plain and residual nets always share their units
    degradation_warmup_fraction: float = RECIPE.warmup_fraction  # every net's linear warm-up, of the run; 0: none
    # The positive control (power issue #64): the first backbone pretrained again, with every pretraining seed, for
    # this fraction of the pretraining budget (a complete schedule of its own), and transferred with the same recipe
    # in the ranking arm (family.leaderboard_arm): a known order -- more pretraining transfers better -- that the job
    # see to read its no-calls as "no difference this job could see" (control.py; Holm alone decides its calls).
    control: float | None = None

    def embedded_test_set(self) -> str:
        """The registered name the embedded legs are scored on (the model-selection split with `selection`)."""
        return embedded_sets(self.selection, self.test_scenes)[1]

    def warmup_of(self, model: str) -> float | None:
        """The training error a backbone's pretraining warms up until (pretrain_warmup), else None."""
        return next((e for m, e in self.pretrain_warmup if m == model), None)

    def weights_of(self, model: str) -> Path | None:
        """The file a backbone's pretrained legs start from when the job was given one (--weights), else None."""
        return next((Path(f) for m, f in self.weights if m == model), None)

    def pretrained_here(self) -> list[str]:
        """The backbones this job pretrains (those without --weights)."""
        return [m for m in self.backbones if self.weights_of(m) is None]

    def control_arm(self) -> str | None:
        """The arm the positive control runs in: the ranking arm (the plan's first pretrained arm in arms.ARMS
        order); None when the plan has no control or no pretrained arm."""
        if self.control is None or not self.backbones:
            return None
        return next((a for a in ARMS if a in self.arms and ARMS[a].pretrained), None)

    def control_kind(self) -> str | None:
        """What the control shortens: "pretraining" of a backbone this job pretrains, "fine-tuning" (the detection
        schedule, from the same file) of one it was given (--weights); None without a control."""
        if self.control_arm() is None:
            return None
        return "fine-tuning" if self.weights_of(self.backbones[0]) is not None else "pretraining"

    def control_iterations(self) -> int:
        """The control's pretraining schedule: `control` of the job's, at least one iteration."""
        return max(1, round(self.pretrain_iterations() * (self.control or 0.0)))

    def lr_for(self, model: str) -> float:
        """Each net's reference learning rate, the one recipe difference, measured necessary: at a shared 0.1 VGG's
        fc6 ReLUs all die within 100 iterations, at a shared 0.01-0.02 ResNet-101 stays near chance."""
        return model_info(model).reference_lr

    def pretrain_items(self) -> int:
        """Training items per epoch (reads the object source's labels, or lists the folder: planning only, never
        for a summary)."""
        from classification.data.objects import load_object_source

        if not self.pretrain_data.embedded:
            n = folder_train_images(self.pretrain_data.folder)
        else:
            n = len(load_object_source("train").labels) - (self.pretrain_holdout if self.selection else 0)
        return min(n, self.pretrain_train_images) if self.pretrain_train_images else n

    def pretrain_iterations(self) -> int:
        """The pretraining schedule: pretrain_epochs over the data, or at paper scale the paper's 60e4 iterations
        (of IMAGENET_BATCH, linearly scaled by train_cls to the GPUs it gets)."""
        if self.scale == "paper":
            from .paper_cost import IMAGENET_ITERATIONS

            return IMAGENET_ITERATIONS
        return max(1, math.ceil(self.pretrain_epochs * self.pretrain_items() / self.pretrain_batch))

    def pretrain_norms(self) -> list[str]:
        """The norms the plan's pretrained arms pretrain with, in arm order."""
        return list(dict.fromkeys(ARMS[a].pretrain_norm for a in self.arms if ARMS[a].pretrained))

    def pretrain_options(self, model: str, norm: str = "BN") -> dict:
        """The model options of a pretraining net (what its stage builds; the time estimate builds the same); a
        norm other than BN (the nets' default) is an option, so the BN stages keep their command lines."""
        return {"width": self.width} | ({"norm": norm} if norm != "BN" else {}) | init_options(model)

    def degradation_options(self) -> dict:
        """The model options of every degradation net: full width, the units of degradation_preact."""
        return {"preact": True} if self.degradation_preact else {}

    def pretrain_args(self, model: str, seed: int, out: Path, iterations: int, norm: str = "BN") -> list[str]:
        dataset, val = self._pretrain_data_args()
        return [str(project_files().tool("train_cls.py")), "--model", model,
                *_model_option_args(self.pretrain_options(model, norm)), *dataset,
                "--iterations", str(iterations), "--batch-size", str(self.pretrain_batch // self.processes()),
                "--lr", str(self.lr_for(model)), "--warmup-iterations", "20",
                *(["--warmup-until-error", str(self.warmup_of(model))] if self.warmup_of(model) is not None else []),
                "--eval-period", str(max(1, iterations // 8)), "--checkpoint-period", str(max(1, iterations // 8)),
                "--keep-checkpoints", "1",  # a resume needs the newest; an hour-long stage loses at most 1/8
                *val, "--seed", str(seed),
                *(["--train-samples", str(self.pretrain_train_images)] if self.pretrain_train_images else []),
                *self._gpu_args(), "--output-dir", str(out)]

    def _pretrain_data_args(self) -> tuple[list[str], list[str]]:
        """(the dataset's arguments, the val set's and the loader's) of a pretraining stage. Embedded scale: the
        embedded composites, or the folder read into memory at pretrain_image_size (imagefolder-small: the same
        recipe, so an exported embedded set gives the embedded numbers), scored on pretrain_val_images of its val
        split; paper scale: the folder with the ImageNet recipe (224-px crops), scored on its whole val split."""
        if self.pretrain_data.embedded:
            val = (["--holdout", str(self.pretrain_holdout)] if self.selection else
                   ["--val-samples", str(self.pretrain_val_images)])
            return ["--dataset", "embedded", "--image-size", str(self.pretrain_image_size)], [*val, "--workers", "1"]
        if self.scale != "paper":
            return (["--dataset", "imagefolder-small", "--data-root", self.pretrain_data.folder, "--image-size",
                     str(self.pretrain_image_size)], ["--val-samples", str(self.pretrain_val_images), "--workers", "1"])
        return ["--dataset", "imagefolder", "--data-root", self.pretrain_data.folder], ["--workers", "4"]

    def processes(self) -> int:
        """Training processes a stage runs: `gpus` (or one CPU process) on each of its `nodes`."""
        return max(1, self.gpus) * self.nodes

    def _gpu_args(self) -> list[str]:
        """A stage's processes: one per GPU it gets (the tools' --num-gpus); none given: one CPU process."""
        return ["--num-gpus", str(self.gpus)] if self.gpus else []

    def degradation_args(self, model: str, seed: int, out: Path) -> list[str]:
        """The same recipe for every net (RECIPE.schedule: the paper's CIFAR lr 0.1 at batch 128, x0.1 at 50% and
        75%, and our linear warm-up), no zero-init, the units of degradation_preact -- so only the depth and the
        shortcuts differ."""
        n = self.degradation_iterations
        val = (["--holdout", str(self.pretrain_holdout)] if self.selection else
               ["--val-samples", str(self.pretrain_val_images)])
        schedule = RECIPE.schedule(n, self.degradation_warmup_fraction)
        return [str(project_files().tool("train_cls.py")), "--model", model,
                *_model_option_args(self.degradation_options()), "--dataset", "embedded",
                "--image-size", str(RECIPE.image_size), "--iterations", str(n),
                "--batch-size", str(RECIPE.batch), *_trainer_option_args(schedule),
                "--eval-period", str(max(1, n // 8)), "--checkpoint-period", str(max(1, n // 2)),
                "--keep-checkpoints", "1", *val, "--workers", "1", "--seed", str(seed), "--output-dir", str(out)]

    def degradation_recipe(self) -> str:
        """The degradation recipe in words, for the report's section and the summary."""
        s = RECIPE.schedule(self.degradation_iterations, self.degradation_warmup_fraction)
        cuts = " and ".join(f"{m:.0%}" for m in s["milestones"])
        warmup = (f", linear warm-up from lr x{s['warmup_factor']:g} over the first {s['warmup_iterations']} "
                  "iterations (ours, not the paper's)" if "warmup_iterations" in s else "")
        return (f"{self.degradation_iterations} iterations of {RECIPE.batch} at {RECIPE.image_size} px, "
                f"lr {s['lr']:g} (x0.1 at {cuts}){warmup}, "
                + ("pre-activation units" if self.degradation_preact else "the paper's 2015 units"))

    def detect_iterations_of(self, arm: str, model: str, fraction: float = 1.0) -> int:
        """Iterations a leg runs: the job's count times the arm's schedule; at paper scale the config's MAX_ITER
        times the arm's schedule, as Detectron2 rescales it for the leg's GPUs (DefaultTrainer.auto_scale_workers:
        iterations / (GPUs / reference world size))."""
        if self.scale != "paper":
            base = self.detect_iterations if self.scale == "embedded" else self.data_scale(model, arm).iterations
            n = base * ARMS[arm].schedule
            # a shortened schedule keeps 2 iterations: Detectron2's lr schedule needs more updates than its 1 value
            return n if fraction == 1.0 else max(2, round(n * fraction))
        max_iter, _, ims = paper_solver(tuple(leg_config_files(model, arm=arm, scale=self.scale,
                                                                data_format=self.detect_data.format)))
        reference = ims // PAPER_IMAGES_PER_GPU
        return int(round(max_iter * ARMS[arm].schedule * fraction / (self.processes() / reference)))

    def data_scale(self, model: str, arm: str) -> DataScale:
        """The input size and 1x schedule of a data-scale leg (data_scale.py); PlanError without the data."""
        configs = leg_config_files(model, arm=arm, scale=self.scale, data_format=self.detect_data.format)
        d = self.detect_data
        try:
            return data_scale(paper_settings(tuple(configs)), median_image=d.median_image,
                              train_images=d.train_images, detect_size=self.detect_size,
                              detect_iterations=self.detect_iterations, epochs=self.detect_epochs,
                              processes=self.processes())
        except ValueError as err:
            raise PlanError(str(err)) from None

    def detect_args(self, model: str, arm: str, weights: Path | None, seed: int, out: Path,
                    fraction: float = 1.0) -> list[str]:
        """tools/train_det.py's command line of a detection leg: its config files, the data's registration, its
        processes, then its overrides; fraction: of the arm's schedule (the fine-tuning control's)."""
        configs, opts = self.detect_config(model, arm, weights, seed, out, fraction)
        return [str(project_files().tool("train_det.py")), *[a for c in configs for a in ("--config-file", c)],
                *self.detect_data.register_flags(), *self._gpu_args(), *opts]

    def detect_config(self, model: str, arm: str, weights: Path | None, seed: int,
                      out: Path, fraction: float = 1.0) -> tuple[list[str], list[str]]:
        """(config files, KEY VALUE overrides) of a detection leg: what its stage runs and what check_arms
        resolves."""
        configs = leg_config_files(model, arm=arm, scale=self.scale, data_format=self.detect_data.format)
        if self.scale == "embedded":
            n = self.detect_iterations_of(arm, model, fraction)
            schedule = ["SOLVER.MAX_ITER", str(n), "SOLVER.STEPS", f"({max(1, int(0.8 * n))},)",
                        "SOLVER.WARMUP_ITERS", str(min(20, max(1, self.detect_iterations // 4))),  # the 1x one:
                        "SOLVER.CHECKPOINT_PERIOD",  # the same warm-up in every arm (not in a longer arm's factor)
                        str(max(1, n // 2))]
        elif self.scale == "data":
            n = self.detect_iterations_of(arm, model, fraction)
            schedule = data_scale_overrides(self.data_scale(model, arm), n)
        else:
            schedule = _paper_schedule(tuple(configs), ARMS[arm].schedule * fraction)
        init = ["MODEL.BACKBONES.ZERO_INIT_RESIDUAL", "True"] if init_options(model) else []  # as pretrained
        return configs, ["MODEL.BACKBONES.NAME", model, "MODEL.BACKBONES.WIDTH", str(self.width), *init,
                         "MODEL.WEIGHTS", str(weights or ""), "SEED", str(seed), "OUTPUT_DIR", str(out), *schedule,
                         *self.detect_data.overrides(self.selection, self.test_scenes)]


def _paper_schedule(configs: tuple[str, ...], multiple: float) -> list[str]:
    """A paper-scale leg's solver overrides: the config's schedule times the arm's multiple, and the config's
    reference world size (IMS_PER_BATCH / 2 images a GPU), from which Detectron2 applies the linear scaling rule
    -- batch and lr in proportion to the GPUs a leg gets, iterations and steps inversely."""
    max_iter, steps, ims = paper_solver(configs)
    if ims % PAPER_IMAGES_PER_GPU:
        raise PlanError(f"{configs[0]}: SOLVER.IMS_PER_BATCH {ims} is not {PAPER_IMAGES_PER_GPU} images a GPU")
    return ["SOLVER.MAX_ITER", str(max(1, round(max_iter * multiple))),
            "SOLVER.STEPS", str(tuple(max(1, round(t * multiple)) for t in steps)),
            "SOLVER.REFERENCE_WORLD_SIZE", str(ims // PAPER_IMAGES_PER_GPU)]


@dataclass
class Stage:
    """One training run of the job: a tool's command line and the directory it writes."""

    title: str
    out: Path
    argv: list[str]  # a tool's command line, run with this interpreter
    kind: str  # "pretrain", "detect" (tools/train_det.py) or "degradation" (tools/train_cls.py, a CIFAR net)
    model: str
    init: str  # "pretrained" / "scratch" (detect), "" (pretrain)
    iterations: int
    group: str = ""  # the report group of a detection stage (group_label)
    deps: list[Path] = field(default_factory=list)  # stage directories that must be finished first
    files: list[Path] = field(default_factory=list)  # weights files the stage starts from that no stage makes
    pretrain_seed: int | None = None  # the seed of a train_cls stage (pretraining or degradation)
    detect_seed: int | None = None
    variant: str = ""  # a detection leg's arm (arms.ARMS), a pretraining run's norm, "" for a degradation net
    control: bool = False  # a stage of the positive control (its shorter pretraining, or a leg from it)

    @property
    def inputs(self) -> list[Path]:
        """What the stage starts from, whose content its record keeps: its dependencies' and the given files."""
        return [*self.deps, *self.files]

    @property
    def rate_key(self) -> tuple[str, str, str]:
        """What its step time depends on: (kind, model, variant); a detection leg's arm stands for every arm of its
        overlay (norm and frozen stages: the GN arms at 1x and 3x, pretrained or not, step alike, timed once)."""
        if self.kind == "detect" and self.variant in ARMS:
            overlay = ARMS[self.variant].overlay
            return self.kind, self.model, next(a for a, arm in ARMS.items() if arm.overlay == overlay)
        return self.kind, self.model, self.variant


def group_label(model: str, arm: str) -> str:
    """The report group of a detection leg: backbone and arm (the one place the label is made)."""
    return f"{model}_{arm}"


def pretraining_label(model: str, norm: str) -> str:
    """How the summary and results.json name a backbone's pretraining runs with one norm ("resnet101 GN")."""
    return f"{model} {norm}"


def pretrain_dir(out: Path, model: str, norm: str, seed: int) -> Path:
    """A pretraining run's directory; BN (the nets' default) keeps the name it had before GN arms existed."""
    return out / "pretrain" / (f"{model}_p{seed}" if norm == "BN" else f"{model}_{norm.lower()}_p{seed}")


def plan_stages(plan: MainJobPlan, out: Path) -> list[Stage]:
    stages = []
    p_iters = plan.pretrain_iterations()
    for model in plan.pretrained_here():
        for norm in plan.pretrain_norms():
            for ps in plan.pretrain_seeds:
                d = pretrain_dir(out, model, norm, ps)
                # "with BN" is the nets' default norm, which a VGG without _bn does not have
                how = f"with {norm}" if norm != "BN" or model_info(model).normalized else "without norm"
                stages.append(Stage(title=f"pretrain {model} x{plan.width:g} {how}, seed {ps} ({p_iters} "
                                          f"iterations of {plan.pretrain_batch}, {plan.pretrain_image_size} px)",
                                    out=d, argv=plan.pretrain_args(model, ps, d, p_iters, norm), kind="pretrain",
                                    model=model, init="", iterations=p_iters, pretrain_seed=ps, variant=norm))
    stages += _control_pretraining(plan, out)
    for model in plan.backbones:
        for arm in (ARMS[a] for a in plan.arms):
            n = plan.detect_iterations_of(arm.name, model)
            group = group_label(model, arm.name)
            if arm.pretrained and plan.weights_of(model) is not None:  # one unit: the file given
                stages += _legs_from_file(plan, model, arm, plan.weights_of(model), out)
            elif arm.pretrained:
                for ps in plan.pretrain_seeds:
                    weights = pretrain_dir(out, model, arm.pretrain_norm, ps) / FINAL_CHECKPOINT
                    for ds in plan.detect_seeds:
                        d = out / "detect" / f"{group}_p{ps}_d{ds}"
                        stages.append(Stage(title=f"Faster R-CNN {model}, {arm.name}, pretraining seed {ps}, "
                                                  f"detection seed {ds}", out=d,
                                            argv=plan.detect_args(model, arm.name, weights, ds, d), kind="detect",
                                            model=model, init=arm.init, iterations=n, group=group,
                                            deps=[weights.parent], pretrain_seed=ps, detect_seed=ds,
                                            variant=arm.name))
            elif model in plan.scratch:
                for ds in plan.scratch_seeds:
                    d = out / "detect" / f"{group}_d{ds}"
                    stages.append(Stage(title=f"Faster R-CNN {model}, {arm.name} ({n} iterations), seed {ds}",
                                        out=d, argv=plan.detect_args(model, arm.name, None, ds, d), kind="detect",
                                        model=model, init=arm.init, iterations=n, group=group, detect_seed=ds,
                                        variant=arm.name))
    stages += _control_legs(plan, out)
    for seed in plan.degradation_seeds if plan.degradation else ():
        for model in plan.degradation:
            d = out / "degradation" / f"{model}_s{seed}"
            stages.append(Stage(title=f"degradation: {model}, seed {seed} ({plan.degradation_iterations} iterations)",
                                out=d, argv=plan.degradation_args(model, seed, d), kind="degradation", model=model,
                                init="", iterations=plan.degradation_iterations, pretrain_seed=seed))
    return stages


def control_label(model: str, arm: str) -> str:
    """The report group of the positive control's legs (the backbone, its arm, the shorter pretraining)."""
    return f"{group_label(model, arm)}_control"


def control_pretrain_dir(out: Path, model: str, norm: str, seed: int) -> Path:
    """A control pretraining run's directory (beside the full-budget runs of the backbone)."""
    full = pretrain_dir(out, model, norm, seed)
    return full.with_name(f"{full.name.removesuffix(f'_p{seed}')}_control_p{seed}")


def _control_pretraining(plan: MainJobPlan, out: Path) -> list[Stage]:
    """The control's pretraining runs: the first backbone, the control arm's norm, every pretraining seed, the same
    recipe for `control` of the iterations."""
    arm = plan.control_arm()
    if plan.control_kind() != "pretraining":
        return []
    model, norm, n = plan.backbones[0], ARMS[arm].pretrain_norm, plan.control_iterations()
    return [Stage(title=f"positive control: pretrain {model} x{plan.width:g} with {norm}, seed {ps}, {plan.control:g}"
                        f" of the budget ({n} iterations of {plan.pretrain_batch})",
                  out=(d := control_pretrain_dir(out, model, norm, ps)), argv=plan.pretrain_args(model, ps, d, n, norm),
                  kind="pretrain", model=model, init="", iterations=n, pretrain_seed=ps, variant=norm, control=True)
            for ps in plan.pretrain_seeds]


def _control_legs(plan: MainJobPlan, out: Path) -> list[Stage]:
    """The control's detection legs: from each control pretraining run, every detection seed, the arm's recipe;
    or, for a backbone the job was given, from its file for `control` of the arm's schedule."""
    arm = plan.control_arm()
    if arm is None:
        return []
    model, group = plan.backbones[0], control_label(plan.backbones[0], arm)
    if plan.control_kind() == "fine-tuning":
        weights = plan.weights_of(model)
        n = plan.detect_iterations_of(arm, model, plan.control)
        return [Stage(title=f"positive control: Faster R-CNN {model}, {arm}, from {weights} for {plan.control:g} of "
                            f"the schedule, detection seed {ds}", out=(d := out / "detect" / f"{group}_given_d{ds}"),
                      argv=plan.detect_args(model, arm, weights, ds, d, plan.control), kind="detect", model=model,
                      init=ARMS[arm].init, iterations=n, group=group, detect_seed=ds, variant=arm, files=[weights],
                      control=True) for ds in plan.detect_seeds]
    legs = []
    for ps in plan.pretrain_seeds:
        weights = control_pretrain_dir(out, model, ARMS[arm].pretrain_norm, ps) / FINAL_CHECKPOINT
        for ds in plan.detect_seeds:
            d = out / "detect" / f"{group}_p{ps}_d{ds}"
            legs.append(Stage(title=f"positive control: Faster R-CNN {model}, {arm}, from {plan.control:g} of the "
                                    f"pretraining, seed {ps}, detection seed {ds}", out=d,
                              argv=plan.detect_args(model, arm, weights, ds, d), kind="detect", model=model,
                              init=ARMS[arm].init, iterations=plan.detect_iterations_of(arm, model), group=group,
                              deps=[weights.parent], pretrain_seed=ps, detect_seed=ds, variant=arm, control=True))
    return legs


def _legs_from_file(plan: MainJobPlan, model: str, arm, weights: Path, out: Path) -> list[Stage]:
    """The detection legs of a backbone whose weights the job was given: one per detection seed, the file an input
    whose content the stage records (a file replaced under the same name is not reused as the old one)."""
    group = group_label(model, arm.name)
    legs = []
    for ds in plan.detect_seeds:
        d = out / "detect" / f"{group}_given_d{ds}"
        legs.append(Stage(title=f"Faster R-CNN {model}, {arm.name}, from {weights}, detection seed {ds}", out=d,
                          argv=plan.detect_args(model, arm.name, weights, ds, d), kind="detect", model=model,
                          init=arm.init, iterations=plan.detect_iterations_of(arm.name, model), group=group,
                          detect_seed=ds, variant=arm.name, files=[weights]))
    return legs
