"""The classification run's configuration: one dataclass, its recipe defaults, and the command line generated from it
(each option is written once: its field, its default and its help live together).

Recipe defaults follow the paper (Sec. 3.4 for ImageNet, Sec. 4.2 for CIFAR-10): lr 0.1 at batch 256 (ImageNet) or
128 (32-pixel datasets), linearly scaled to the global batch; weight decay 1e-4 on every parameter, as Caffe
applied it (`--no-decay-norm-and-bias` gives the modern variant); ResNet-110/1202 on CIFAR warm up at lr x0.1
until the training error is below 80%.
"""

from __future__ import annotations

import argparse
import math
import os
import typing
from dataclasses import MISSING, dataclass, field, fields

from backbones.registry import parse_model_option

from .datasets import DATASET_TABLE

__all__ = ["ClsConfig", "DATASETS", "TEST_MODES", "SEED_LIMIT", "add_config_arguments", "config_from_args",
           "model_option_argument"]

SEED_LIMIT = 2**32  # numpy seeds are 32-bit: every seed a run takes (train_cls's, the main job's) is below it

DATASETS = tuple(DATASET_TABLE)  # the dataset table's names (classification/engine/datasets.py)
TEST_MODES = ("center", "ten-crop", "multi-scale")
_WARMUP_UNTIL_ERROR_MODELS = ("cifar_resnet110", "cifar_resnet1202")  # paper Sec. 4.2


def _opt(default, help: str, **cli):
    """A field with its command-line help (and optional flag spelling / choices); `dict` means an empty dict."""
    kw = {"default_factory": dict} if default is dict else {"default": default}
    return field(**kw, metadata={"help": help, **cli})


@dataclass
class ClsConfig:
    model: str = _opt("cifar_resnet20", "backbones.list_models() name")
    model_options: dict = _opt(dict, "model option KEY=VALUE, e.g. width=0.25, shortcut=A, preact=True (repeatable)",
                               flag="--model-option")
    dataset: str = _opt("embedded", "training data", choices=DATASETS)
    data_root: str | None = _opt(None, "dataset directory (cifar10, imagefolder, imagefolder-small; fashion-mnist: "
                                       "Debian's by default)")
    image_size: int = _opt(32, "image size of the embedded dataset and of imagefolder-small (pixels)")
    embedded_cache: bool = _opt(True, "embedded dataset: render every composite once into a cached uint8 array and "
                                      "augment whole batches with tensor ops (--no-embedded-cache: composite each "
                                      "image in data-loader workers; same images, same augmentation distribution)")
    data_seed: int = _opt(0, "embedded dataset: seed of the compositing (backgrounds, colours, placement), fixed so "
                             "every training seed sees the same images; every dataset: seed of the "
                             "--train-samples / --val-samples subsets")
    holdout: int | None = _opt(None, "hold out the last N training items as the validation set (choosing schedules "
                                     "without the test split); embedded dataset only")
    train_samples: int | None = _opt(None, "use only N training images (quick runs): stratified by class, seeded by "
                                           "data_seed (the embedded set: its first N, already in random class "
                                           "order); recorded in evaluation.json 'subsets'")
    val_samples: int | None = _opt(None, "evaluate on N validation images only, chosen as --train-samples")
    iterations: int = _opt(1000, "training iterations")
    batch_size: int = _opt(128, "images per process and iteration")
    lr: float | None = _opt(None, "base learning rate (default: 0.1 x global batch / 256 for imagefolder, / 128 for "
                                  "the 32-pixel datasets)")
    momentum: float = _opt(0.9, "SGD momentum")
    weight_decay: float = _opt(1e-4, "weight decay")
    decay_norm_and_bias: bool = _opt(True, "apply weight decay to BN and bias parameters too (the paper's Caffe "
                                           "setting; --no-decay-norm-and-bias: the modern variant)")
    schedule: str = _opt("step", "step: x0.1 at the milestones; plateau: x0.1 when the val error stops improving",
                         choices=("step", "plateau"))
    milestones: tuple[float, ...] = _opt((0.5, 0.75), "fractions of the run where the step schedule divides the lr "
                                                      "by 10 (CIFAR: 32k and 48k of 64k)")
    plateau_patience: int = _opt(3, "evaluations without improvement before the plateau schedule divides the lr")
    warmup_iterations: int = _opt(0, "iterations of warm-up (--warmup-method)")
    warmup_method: str = _opt("constant", "constant: lr x warmup-factor during the warm-up (the paper's ResNet-110); "
                                          "linear: from lr x warmup-factor up to lr over --warmup-iterations (Goyal "
                                          "et al. 2017, Detectron2's WarmupLinear)", choices=("constant", "linear"))
    warmup_factor: float = _opt(0.1, "lr multiplier during warm-up (0.1: the paper's 0.01 for ResNet-110)")
    warmup_until_error: float | None = _opt(None, "keep warming up until the running training error is below this "
                                                  "(default 0.8 for cifar_resnet110/1202 on cifar10, as the paper)")
    amp: bool = _opt(True, "mixed precision where CUDA is available (--no-amp: off)")
    channels_last: bool = _opt(True, "weights and inputs in channels_last (NHWC): 1.2-1.4x per step on CPU "
                                     "(tools/benchmark.py); --no-channels-last: NCHW")
    workers: int = _opt(2, "data loading processes")
    eval_period: int = _opt(500, "evaluate every N iterations (and at the end)")
    checkpoint_period: int = _opt(500, "checkpoint every N iterations (and at the end)")
    keep_checkpoints: int = _opt(0, "keep only the newest N intermediate checkpoints, deleting older ones once the "
                                    "newer is complete (0: keep all; model_final.pth always stays)")
    test_mode: str = _opt("center", "evaluation views: center (the whole 32-px image for small datasets), ten-crop "
                                    "or multi-scale (fully convolutional at shorter sides 224..640; imagefolder)",
                          choices=TEST_MODES)
    fast_inference: bool = _opt(False, "evaluate a frozen copy through backbones.optimize_for_inference (BN folded, "
                                       "channels_last, torch.compile with Inductor freezing): ~1.5x per ResNet-50 "
                                       "batch on CPU after a compile of 5-30 s per evaluation and batch shape, so "
                                       "for a whole ImageNet val (10-crop), not for frequent small evaluations")
    on_error: str = _opt("raise", "unreadable images: raise (naming the file) or skip (counted and logged)",
                         choices=("raise", "skip"))
    seed: int = _opt(0, "seed of initialisation, data order and augmentation")
    output_dir: str = _opt("", "run directory (default: output/classification/<dataset>_<model>)")
    deterministic: bool = _opt(False, "bitwise-repeatable CPU runs (slower)")

    def __post_init__(self):
        """Refuse values that would fail later or silently do something else, naming the option."""
        for name in ("iterations", "batch_size", "eval_period", "checkpoint_period", "image_size", "plateau_patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.keep_checkpoints, bool) or not isinstance(self.keep_checkpoints, int) \
                or self.keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be an integer >= 0, got {self.keep_checkpoints!r}")
        for name in ("seed", "data_seed"):  # numpy's seeds are 32-bit: a bare "Seed must be between 0 and 2**32 - 1"
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_LIMIT:
                raise ValueError(f"{name} must be an integer in [0, 2**32), got {value!r}")
        for name in ("train_samples", "val_samples", "holdout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if "width" in self.model_options:  # refused before a single weight is allocated (width 64: ~180 GB)
            from backbones.width import check_width

            try:
                check_width(self.model_options["width"])
            except ValueError as err:
                raise ValueError(f"model option (--model-option) {err}") from None
        if self.dataset == "embedded" and self.image_size < 8:  # objects are drawn at 60-100% of the image side
            raise ValueError(f"image_size must be >= 8 for the embedded dataset (its objects are drawn at 60-100% "
                             f"of the image; below 8 px none is recognisable), got {self.image_size}")
        if self.holdout is not None and self.dataset != "embedded":
            raise ValueError(f"holdout is supported for the embedded dataset only, not {self.dataset!r}")
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be positive and finite, got {self.lr!r}")
        if not 0 <= self.momentum < 1:  # NaN fails too: it trained to NaN weights and exited 0
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)) or self.warmup_iterations < 0 \
                or not 0 < self.warmup_factor <= 1:
            raise ValueError("weight_decay (finite) and warmup_iterations must be >= 0 and warmup_factor in (0, 1]")
        # a training error in [0, 1] (0: the low lr for the whole run); NaN or 1.5 warmed up forever, unsaid
        if self.warmup_method == "linear" and self.warmup_until_error is not None:
            raise ValueError("warmup_method 'linear' ramps over warmup_iterations; it does not combine with "
                             "warmup_until_error (a constant warm-up that ends on the training error)")
        if self.warmup_until_error is not None and not 0 <= self.warmup_until_error <= 1:
            raise ValueError(f"warmup_until_error is a training error in [0, 1], got {self.warmup_until_error!r}")
        if any(not 0 < m <= 1 for m in self.milestones):
            raise ValueError(f"milestones are fractions of the run in (0, 1], got {list(self.milestones)}")
        first_cut = min(self.milestones, default=1.0) * self.iterations if self.schedule == "step" else None
        if self.warmup_method == "linear" and first_cut is not None and self.warmup_iterations > first_cut:
            raise ValueError(f"a linear warm-up of {self.warmup_iterations} iterations runs past the first lr "
                             f"cut at iteration {first_cut:g} (milestones {list(self.milestones)} of "
                             f"{self.iterations}): it would ramp to the base lr over the cut")
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"{f.name} must be one of {choices}, got {getattr(self, f.name)!r}")
        if not self.output_dir:
            self.output_dir = f"output/classification/{self.dataset}_{self.model}"
        self.output_dir = os.path.expanduser(self.output_dir)  # "~/runs/x" made a folder named "~" in the cwd

    # --- the recipe: what an unset option means for this dataset / model -----------------------------------------
    def base_lr(self, world_size: int = 1) -> float:
        if self.lr is not None:
            return self.lr
        return 0.1 * self.batch_size * world_size / DATASET_TABLE[self.dataset].reference_batch

    def warmup_error(self) -> float | None:
        if self.warmup_until_error is not None:
            return self.warmup_until_error
        if self.warmup_method == "linear":  # the paper's ResNet-110 default is a constant warm-up; a linear one
            return None  # chosen by the user ends on its iterations alone
        return 0.8 if self.dataset == "cifar10" and self.model in _WARMUP_UNTIL_ERROR_MODELS else None


def _is_bool(tp) -> bool:
    return tp is bool


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """One option per ClsConfig field: --iterations, --batch-size, ..., bools as --x / --no-x."""
    hints = typing.get_type_hints(ClsConfig)
    g = parser.add_argument_group("run configuration (classification.engine.config.ClsConfig)")
    for f in fields(ClsConfig):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        tp = hints[f.name]
        default = f.default if f.default is not MISSING else f.default_factory()
        kw = {"dest": f.name, "help": f.metadata["help"]}
        if _is_bool(tp):
            g.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, **kw)
        elif f.name == "model_options":
            g.add_argument(flag, action="append", type=model_option_argument, default=[], metavar="KEY=VALUE", **kw)
        elif typing.get_origin(tp) is tuple:
            g.add_argument(flag, type=float, nargs="+", default=list(default), **kw)
        else:
            base = next((a for a in typing.get_args(tp) if a is not type(None)), tp)  # X | None -> X
            g.add_argument(flag, type=base, default=default, choices=f.metadata.get("choices"), **kw)
    return parser


def model_option_argument(text: str):
    try:
        return parse_model_option(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def config_from_args(args: argparse.Namespace) -> ClsConfig:
    values = {f.name: getattr(args, f.name) for f in fields(ClsConfig)}
    values["model_options"] = dict(values["model_options"])
    values["milestones"] = tuple(values["milestones"])
    return ClsConfig(**values)
