"""What the main job runs: the plan (backbones, widths, schedules, seeds), its presets, and the stages it makes.

The paper's experiment (Tables 7/8) in miniature:
1. the embedded detection dataset (scenes of Fashion-MNIST objects; val scenes use test-split objects only);
2. ImageNet-style pretraining of VGG-16 (BN variant) and ResNet-101 at reduced width with tools/train_cls.py on
   the Fashion-MNIST *train* items composited on random backgrounds, one recipe for both, several pretraining seeds;
3. Faster R-CNN with each pretrained backbone (the paper's C4 design for ResNet, py-faster-rcnn's fc6/fc7 head for
   VGG; BN frozen, FREEZE_AT 2), detection seeds nested under each pretraining seed, and from-scratch controls
   with the identical detection schedule, all with tools/train_det.py.
`selection=True` is the model-selection variant: pretraining scored on held-out train items and detection trained
on `embedded_train_fit`, scored on `embedded_train_holdout` -- schedules are chosen there, never on the val split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from backbones import list_models, model_info
from classification.analysis.degradation import RECIPE
from classification.engine.run_files import FINAL_CHECKPOINT

from .project import project_files

__all__ = ["MainJobPlan", "Stage", "PRESETS", "DEFAULT_PRESET", "leg_config_files", "plan_stages", "validate_plan",
           "PlanError"]

# The paper's Faster R-CNN config of each detection design (backbones.ModelInfo.detection_design).
DESIGN_CONFIGS = {"vgg_fc": ("COCO-Detection", "faster_rcnn_vgg16.yaml"),
                  "C4": ("COCO-Detection", "faster_rcnn_R_101_C4.yaml")}
MAIN_JOB_FAMILIES = ("vgg", "resnet", "plain")  # the ImageNet-style nets; CIFAR nets have no detection design here


class PlanError(ValueError):
    """A plan that cannot run: the message names the option."""


def _model_option_args(options: dict) -> list[str]:
    """A stage's model options as train_cls.py's arguments: --model-option KEY=VALUE each."""
    return [a for k, v in options.items() for a in ("--model-option", f"{k}={v}")]


def paper_config(model: str) -> Path:
    """The paper config of the backbone's detection design (COCO-Detection/*.yaml)."""
    return project_files().config(*DESIGN_CONFIGS[model_info(model).detection_design])


def leg_config_files(model: str, *, pretrained: bool) -> list[str]:
    """The config files of a main-job detection leg: the paper config of the backbone's design, the smoke overlay,
    and for a pretrained leg the transfer overlay (the one definition: the job, its estimates, the benchmarks)."""
    files = project_files()
    return [str(paper_config(model)), str(files.config("Embedded-Detection", "smoke.yaml"))] + (
        [str(files.config("Embedded-Detection", "pretrained.yaml"))] if pretrained else [])


@dataclass(frozen=True)
class MainJobPlan:
    """What the main job runs, with the schedules CONVERGENCE.md measured on held-out training data: the detection
    legs are converged there (doubling 3200 iterations moved AP50 by less than 2 points), and so is pretraining at
    32 epochs (the shortest one recipe with which doubling moves neither net's top-1 error by 2 points)."""

    backbones: tuple[str, ...] = ("vgg16_bn", "resnet101")  # the mission's pair (VGG-16 in its BN variant)
    width: float = 0.25  # channel multiplier of every net (backbones.width); 1.0 is not pretrainable here
    pretrain_image_size: int = 32  # Fashion-MNIST items on 32x32 backgrounds
    pretrain_epochs: float = 32.0  # passes over the training items; held-out error: 16 -> 32 moved ResNet-101 by
    #                                1.9 points, 32 -> 64 VGG-16(BN) by 1.3 (16 -> 32: 2.6; CONVERGENCE.md)
    pretrain_batch: int = 128  # fills 2 cores (tools/benchmark.py main_job section)
    pretrain_seeds: tuple[int, ...] = (0, 1)  # initialisation, data order and augmentation of the pretraining
    pretrain_val_images: int = 2000  # the first 2,000 Fashion-MNIST test items, composited
    pretrain_train_images: int | None = None  # None: all training items (60,000 for Fashion-MNIST)
    pretrain_holdout: int = 5000  # selection=True: the last N train items are the val set instead
    detect_iterations: int = 3200  # of 2 images, lr x0.1 for the last 20%; 1600 -> 3200 moved ResNet-101 +5.9
    #                                AP50 on the held-out training scenes, 3200 -> 6400 +0.3 (CONVERGENCE.md)
    detect_seeds: tuple[int, ...] = (0, 1)  # nested under every pretraining seed
    scratch: tuple[str, ...] = ("vgg16_bn", "resnet101")  # from-scratch controls
    scratch_seeds: tuple[int, ...] = (0,)  # their seeds: two or more give the gain over scratch an interval
    selection: bool = False  # the model-selection variant (held-out training data; see the module docstring)
    # The degradation problem in miniature (paper Figs. 1, 6, 7): plain and residual CIFAR-style nets of two depths,
    # one budget, on the same cached composites as the pretraining; () leaves it out.
    degradation: tuple[str, ...] = ()
    degradation_iterations: int = RECIPE.iterations  # of 128 images at lr 0.1, x0.1 at 50% and 75% (classification.
    #   analysis.degradation.RECIPE, shared with tools/degradation.py);
    #   on 5,000 held-out items (RESULTS.md, one seed) plain-20 / plain-56 / ResNet-20 / ResNet-56 reach 35.7 / 82.5
    #   / 41.0 / 42.6% training error with pre-activation units; with the 2015 units the paper's warm-up (lr 0.01 to
    #   80%) made every net worse
    degradation_seeds: tuple[int, ...] = (0, 1, 2, 3)  # seeds are the units of its comparisons: with 2 per net
    #   (Welch's t on 1-2 degrees of freedom) plain-56 at chance vs plain-20 at 62 +- 9% made no call (RESULTS.md)
    degradation_preact: bool = RECIPE.preact  # pre-activation units (He et al. 2016) for all four nets: with the
    #   paper's post-activation ones ResNet-56's un-normalised pooled features blow up the classifier at lr 0.1
    #   within 10 iterations and it stays at chance (RESULTS.md); plain and residual nets keep the same units

    def lr_for(self, model: str) -> float:
        """Each net's reference learning rate, the one recipe difference, measured necessary: at a shared 0.1 VGG's
        fc6 ReLUs all die within 100 iterations, at a shared 0.01-0.02 ResNet-101 stays near chance."""
        return model_info(model).reference_lr

    def pretrain_items(self) -> int:
        """Training items per epoch (reads the object source's labels: planning only, never for a summary)."""
        from classification.data.objects import load_object_source

        n = len(load_object_source("train").labels) - (self.pretrain_holdout if self.selection else 0)
        return min(n, self.pretrain_train_images) if self.pretrain_train_images else n

    def pretrain_iterations(self) -> int:
        return max(1, math.ceil(self.pretrain_epochs * self.pretrain_items() / self.pretrain_batch))

    def pretrain_options(self, model: str) -> dict:
        """The model options of a pretraining net (what its stage builds; the time estimate builds the same)."""
        options = {"width": self.width}
        if model_info(model).zero_init_residual:  # Goyal et al.: each block starts as the identity; without it
            options["zero_init_residual"] = True  # ResNet-101 at this width stays at chance
        return options

    def degradation_options(self) -> dict:
        """The model options of every degradation net: full width, the units of degradation_preact."""
        return {"preact": True} if self.degradation_preact else {}

    def pretrain_args(self, model: str, seed: int, out: Path, iterations: int) -> list[str]:
        val = (["--holdout", str(self.pretrain_holdout)] if self.selection else
               ["--val-samples", str(self.pretrain_val_images)])
        return [str(project_files().tool("train_cls.py")), "--model", model,
                *_model_option_args(self.pretrain_options(model)),
                "--dataset", "embedded", "--image-size", str(self.pretrain_image_size),
                "--iterations", str(iterations), "--batch-size", str(self.pretrain_batch),
                "--lr", str(self.lr_for(model)), "--warmup-iterations", "20",
                "--eval-period", str(max(1, iterations // 8)), "--checkpoint-period", str(max(1, iterations // 8)),
                "--keep-checkpoints", "1",  # a resume needs the newest; an hour-long stage loses at most 1/8
                *val, "--workers", "1", "--seed", str(seed),
                *(["--train-samples", str(self.pretrain_train_images)] if self.pretrain_train_images else []),
                "--output-dir", str(out)]

    def degradation_args(self, model: str, seed: int, out: Path) -> list[str]:
        """The same recipe for every net -- the paper's CIFAR one: lr 0.1 at batch 128, x0.1 at 50% and 75%, no
        warm-up, no zero-init; the units of degradation_preact -- so only the depth and the shortcuts differ."""
        n = self.degradation_iterations
        val = (["--holdout", str(self.pretrain_holdout)] if self.selection else
               ["--val-samples", str(self.pretrain_val_images)])
        return [str(project_files().tool("train_cls.py")), "--model", model,
                *_model_option_args(self.degradation_options()), "--dataset", "embedded",
                "--image-size", str(self.pretrain_image_size), "--iterations", str(n),
                "--batch-size", str(RECIPE.batch), "--lr", str(RECIPE.lr), "--eval-period", str(max(1, n // 8)),
                "--checkpoint-period", str(max(1, n // 2)),
                "--keep-checkpoints", "1", *val, "--workers", "1", "--seed", str(seed), "--output-dir", str(out)]

    def detect_args(self, model: str, weights: Path | None, seed: int, out: Path) -> list[str]:
        configs = leg_config_files(model, pretrained=weights is not None)
        n = self.detect_iterations
        schedule = ["SOLVER.MAX_ITER", str(n), "SOLVER.STEPS", f"({max(1, int(0.8 * n))},)",
                    "SOLVER.WARMUP_ITERS", str(min(20, max(1, n // 4))), "SOLVER.CHECKPOINT_PERIOD",
                    str(max(1, n // 2))]
        data = (["DATASETS.TRAIN", '("embedded_train_fit",)', "DATASETS.TEST", '("embedded_train_holdout",)']
                if self.selection else [])
        return [str(project_files().tool("train_det.py")), *[a for c in configs for a in ("--config-file", str(c))],
                "MODEL.BACKBONES.NAME", model, "MODEL.BACKBONES.WIDTH", str(self.width),
                "MODEL.WEIGHTS", str(weights or ""), "SEED", str(seed), "OUTPUT_DIR", str(out), *schedule, *data]


# The main job's presets (one tool, three budgets). full: the converged comparison, 2 pretraining x 2 detection
# seeds (CONVERGENCE.md's schedules), with the degradation experiment; demo: one seed per leg at the schedules
# CONVERGENCE.md measured on held-out training data to give both pretrained detectors AP50 > 85 (4 epochs: 24-26%
# held-out error; 1600 detection iterations: AP50 85.5 / 92.7), about 20 minutes on 2 cores -- no backbone call
# from one seed; quick: the smoke path, the pipeline in a few minutes, not converged.
PRESETS = {
    "full": {"scratch_seeds": (0, 1), "degradation": RECIPE.models},
    "demo": {"pretrain_epochs": 4.0, "pretrain_seeds": (0,), "detect_seeds": (0,), "detect_iterations": 1600},
    "quick": {"pretrain_epochs": 1.0, "pretrain_seeds": (0,), "detect_seeds": (0,), "detect_iterations": 400},
}
DEFAULT_PRESET = "demo"


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
    pretrain_seed: int | None = None  # the seed of a train_cls stage (pretraining or degradation)
    detect_seed: int | None = None

    @property
    def rate_key(self) -> tuple[str, str, str]:
        return self.kind, self.model, self.init


def group_label(model: str, init: str) -> str:
    """The report group of a detection leg: backbone and initialisation (the one place the label is made)."""
    return f"{model}_{init}"


def plan_stages(plan: MainJobPlan, out: Path) -> list[Stage]:
    stages = []
    p_iters = plan.pretrain_iterations()
    for model in plan.backbones:
        for ps in plan.pretrain_seeds:
            d = out / "pretrain" / f"{model}_p{ps}"
            stages.append(Stage(title=f"pretrain {model} x{plan.width:g}, seed {ps} ({p_iters} iterations of "
                                      f"{plan.pretrain_batch}, {plan.pretrain_image_size} px)",
                                out=d, argv=plan.pretrain_args(model, ps, d, p_iters), kind="pretrain", model=model,
                                init="", iterations=p_iters, pretrain_seed=ps))
    n = plan.detect_iterations
    for model in plan.backbones:
        for ps in plan.pretrain_seeds:
            weights = out / "pretrain" / f"{model}_p{ps}" / FINAL_CHECKPOINT
            for ds in plan.detect_seeds:
                d = out / "detect" / f"{model}_p{ps}_d{ds}"
                stages.append(Stage(title=f"Faster R-CNN {model}, pretraining seed {ps}, detection seed {ds}",
                                    out=d, argv=plan.detect_args(model, weights, ds, d), kind="detect", model=model,
                                    init="pretrained", iterations=n, group=group_label(model, "pretrained"),
                                    deps=[weights.parent], pretrain_seed=ps, detect_seed=ds))
    for model in plan.scratch:
        for ds in plan.scratch_seeds:
            d = out / "detect" / f"{model}_scratch_d{ds}"
            stages.append(Stage(title=f"Faster R-CNN {model} from scratch (control), seed {ds}", out=d,
                                argv=plan.detect_args(model, None, ds, d), kind="detect", model=model,
                                init="scratch", iterations=n, group=group_label(model, "scratch"), detect_seed=ds))
    for seed in plan.degradation_seeds if plan.degradation else ():
        for model in plan.degradation:
            d = out / "degradation" / f"{model}_s{seed}"
            stages.append(Stage(title=f"degradation: {model}, seed {seed} ({plan.degradation_iterations} iterations)",
                                out=d, argv=plan.degradation_args(model, seed, d), kind="degradation", model=model,
                                init="", iterations=plan.degradation_iterations, pretrain_seed=seed))
    return stages


def validate_plan(plan: MainJobPlan) -> None:
    """PlanError naming the option for a plan that cannot run or would count wrongly."""
    known = set(list_models())
    for b in plan.backbones:
        if b not in known or model_info(b).family not in MAIN_JOB_FAMILIES:
            raise PlanError(f"--backbones {b!r}: not a VGG / ResNet / plain model of backbones.list_models()")
    for b in plan.degradation:
        if b not in known or model_info(b).family not in ("cifar_plain", "cifar_resnet"):
            raise PlanError(f"--degradation {b!r}: not a CIFAR plain / ResNet model of backbones.list_models()")
    if plan.degradation and not plan.degradation_iterations > 0:
        raise PlanError(f"--degradation-iterations must be positive, got {plan.degradation_iterations}")
    for name in ("pretrain_seeds", "detect_seeds", "scratch_seeds", "degradation_seeds"):
        seeds = getattr(plan, name)
        if len(set(seeds)) != len(seeds):
            raise PlanError(f"--{name.replace('_', '-')} lists a seed twice ({list(seeds)}): n would count one run "
                            "twice")
        if any(s < 0 for s in seeds):
            raise PlanError(f"--{name.replace('_', '-')} must be >= 0")
    for name in ("pretrain_epochs", "detect_iterations", "pretrain_val_images"):
        if not getattr(plan, name) > 0:
            raise PlanError(f"--{name.replace('_', '-')} must be positive, got {getattr(plan, name)}")
