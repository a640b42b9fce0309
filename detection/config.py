"""The plugin's config keys (one function adds them all) and config loading for the tools.

Two keys differ by one letter; both are needed:
- MODEL.BACKBONE.NAME  (Detectron2's own) names the *Detectron2 backbone builder*: "build_backbones_trunk" (C4,
  VGG) or "build_backbones_fpn_backbone" (FPN);
- MODEL.BACKBONES.*    (this plugin's) describes the `backbones` *network* those builders wrap: NAME ("resnet101",
  "vgg16_bn", ...), WIDTH, NORM, FREEZE_AT, ... (config_keys.add_backbones_config, one comment per key).
Detectron2's own MODEL.BACKBONE.FREEZE_AT and MODEL.RESNETS.* drive those keys, mirror them or are refused
(detectron2_keys). Where each key is read: ARCHITECTURE.md.
"""

from __future__ import annotations

import logging
import os

from detectron2.config import CfgNode as CN
from detectron2.config import get_cfg

from .config_keys import add_backbones_config
from .detectron2_keys import mentions, mirror_detectron2_keys, resolve_detectron2_keys
from .safe_yaml import ConfigFileError, load_yaml

__all__ = ["add_backbones_config", "get_detection_cfg", "apply_weights_conventions", "log_weights_conventions",
           "check_config_file", "check_run_config", "ConfigFileError"]

logger = logging.getLogger(__name__)


def _backbone_build_problems(cfg: CN) -> list[str]:
    """MODEL.BACKBONES keys of the net's build a run cannot honour, named (never ignored)."""
    from backbones import model_info
    from backbones.norm import GN_GROUPS

    problems, b = [], cfg.MODEL.BACKBONES
    groups = b.GN_GROUPS
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        problems.append(f"MODEL.BACKBONES.GN_GROUPS {groups!r}: an integer >= 1")
    elif groups != GN_GROUPS and b.NORM != "GN":
        problems.append(f"MODEL.BACKBONES.GN_GROUPS {groups}: only NORM \"GN\" has groups (NORM is {b.NORM!r})")
    elif b.NORM == "GN" and (why := _uneven_groups(cfg)):  # the default 32 too: WIDTH 0.3 has a 38-channel layer
        problems.append(f"MODEL.BACKBONES.GN_GROUPS {groups}: {why} at WIDTH {b.WIDTH}")
    if not isinstance(b.ZERO_INIT_RESIDUAL, bool):
        problems.append(f"MODEL.BACKBONES.ZERO_INIT_RESIDUAL {b.ZERO_INIT_RESIDUAL!r}: True or False")
    elif b.ZERO_INIT_RESIDUAL:
        try:
            residual = model_info(b.NAME).residual
        except ValueError:
            residual = True  # an unknown NAME is named where the backbone is built
        if not residual:
            problems.append(f"MODEL.BACKBONES.ZERO_INIT_RESIDUAL True: {b.NAME} has no residual branches")
        elif b.PREACT or not b.NORM:  # the zeroed norm is the one after a branch's last conv
            problems.append("MODEL.BACKBONES.ZERO_INIT_RESIDUAL True: needs a norm after each branch's last conv "
                            f"(PREACT {b.PREACT}, NORM {b.NORM!r})")
        elif b.NORM == "FrozenBN" and not cfg.MODEL.WEIGHTS:  # a frozen zero scale: the branch stays 0 for good
            problems.append("MODEL.BACKBONES.ZERO_INIT_RESIDUAL True: with NORM \"FrozenBN\" and no MODEL.WEIGHTS "
                            "every residual branch would stay zero (its last norm's scale is frozen at 0)")
    return problems


def _uneven_groups(cfg: CN) -> str | None:
    """Why the detector's net (MODEL.BACKBONES, built as the run builds it, on the meta device: shapes only) has a GN
    layer whose channels GN_GROUPS does not split, or None; any other problem of the build (a NAME or WIDTH the net
    refuses) is named where the backbone is built."""
    import torch

    from backbones.norm import UnevenGroupsError

    from .modeling.backbone import backbone_spec_from_cfg

    try:
        with torch.device("meta"):
            backbone_spec_from_cfg(cfg).build()
    except UnevenGroupsError as err:
        return (f"a layer of {cfg.MODEL.BACKBONES.NAME} has {err.channels} channels, which {err.groups} groups do not "
                "split evenly")
    except (ValueError, TypeError, KeyError):  # not this check's to name: the build names it
        return None
    return None


def check_run_config(cfg: CN, *, training: bool = True) -> None:
    """Values a training or evaluation run cannot use, refused before anything starts, naming the key (they used
    to fail later with a bare KeyError or assertion, or train something else: "diverged at iteration 0").
    training=False (--eval-only): the keys only training reads are not checked."""
    problems = _model_problems(cfg) + _run_problems(cfg, training) + _input_and_solver_problems(cfg)
    if problems:
        raise ValueError("config: " + "; ".join(problems))


def _finite(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _model_problems(cfg: CN) -> list[str]:
    """The input normalisation, the counts every run needs, and the backbone's build keys."""
    from backbones.width import MAX_WIDTH

    problems = []
    for key in ("MODEL.PIXEL_MEAN", "MODEL.PIXEL_STD"):
        v = list(cfg.MODEL[key.split(".")[1]])
        if len(v) != 3 or not all(_finite(x) for x in v):
            problems.append(f"{key} {v}: three finite numbers, one per channel")
        elif key.endswith("STD") and min(v) <= 0:
            problems.append(f"{key} {v}: standard deviations must be > 0")
    for key, low in (("MODEL.ROI_HEADS.NUM_CLASSES", 1), ("SOLVER.IMS_PER_BATCH", 1), ("SOLVER.MAX_ITER", 1),
                     ("SOLVER.CHECKPOINT_PERIOD", 1)):
        node = cfg
        for part in key.split("."):
            node = node[part]
        if isinstance(node, bool) or not isinstance(node, int) or node < low:
            problems.append(f"{key} {node!r}: an integer >= {low}")
    width = cfg.MODEL.BACKBONES.WIDTH
    if not _finite(width) or not 0 < width <= MAX_WIDTH:
        problems.append(f"MODEL.BACKBONES.WIDTH {width!r}: a channel multiplier in (0, {MAX_WIDTH}]")
    return problems + _backbone_build_problems(cfg)


def _run_problems(cfg: CN, training: bool) -> list[str]:
    """The datasets, the output directory, the sampler, the evaluator and the RoI head's features."""
    from .datasets.validation import dataset_name_problem
    from .evaluation.coco import COCO_BACKENDS

    problems = []
    for key in ("TRAIN", "TEST"):
        for name in cfg.DATASETS[key]:
            if why := dataset_name_problem(name):
                problems.append(f"DATASETS.{key} {name!r}: {why}")
    if not str(cfg.OUTPUT_DIR).strip():
        problems.append('OUTPUT_DIR "": a run needs a directory for its outputs')
    # ours is TrainingSampler's resumable equivalent; config.yaml recorded a RepeatFactorTrainingSampler never run
    if training and cfg.DATALOADER.SAMPLER_TRAIN != "TrainingSampler":
        problems.append(f"DATALOADER.SAMPLER_TRAIN {cfg.DATALOADER.SAMPLER_TRAIN!r}: only TrainingSampler (a shuffled "
                        "stream; detection/engine/data.py's resumable sampler) is implemented")
    if cfg.EVAL.COCO_BACKEND not in COCO_BACKENDS:
        problems.append(f"EVAL.COCO_BACKEND {cfg.EVAL.COCO_BACKEND!r}: one of {list(COCO_BACKENDS)}")
    head, feats = cfg.MODEL.ROI_HEADS.NAME, list(cfg.MODEL.BACKBONES.OUT_FEATURES)
    if head in ("BackbonesRes5ROIHeads", "BackbonesVGGROIHeads") and list(cfg.MODEL.ROI_HEADS.IN_FEATURES) != feats:
        problems.append(f"MODEL.ROI_HEADS.IN_FEATURES {list(cfg.MODEL.ROI_HEADS.IN_FEATURES)} with "
                        f"MODEL.BACKBONES.OUT_FEATURES {feats}: the {head} head pools the trunk's one output")
    return problems


def _input_and_solver_problems(cfg: CN) -> list[str]:
    """The image sizes, the schedule, the seed and the optimizer's numbers."""
    problems = []
    for key, low in (("INPUT.MIN_SIZE_TEST", 0), ("INPUT.MAX_SIZE_TEST", 1), ("INPUT.MAX_SIZE_TRAIN", 1)):
        value = cfg.INPUT[key.split(".")[1]]  # MIN_SIZE_TEST -5 trained to the end, then failed unnamed
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            problems.append(f"{key} {value!r}: an integer >= {low}" + (" (0: no resizing)" if low == 0 else ""))
    sizes = cfg.INPUT.MIN_SIZE_TRAIN
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        problems.append(f"INPUT.MIN_SIZE_TRAIN {cfg.INPUT.MIN_SIZE_TRAIN!r}: integers >= 1")
    steps = list(cfg.SOLVER.STEPS)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in steps) or steps != sorted(steps):
        problems.append(f"SOLVER.STEPS {tuple(steps)}: increasing iteration numbers >= 1")
    seed = cfg.SEED
    if isinstance(seed, bool) or not isinstance(seed, int) or seed >= 2 ** 32:
        problems.append(f"SEED {seed!r}: an integer below 2**32 (negative: a random seed)")
    # the optimizer's numbers: a NaN BASE_LR trained one iteration and reported "training diverged at iteration 1"
    # (YAML's .nan / .inf pass the override type check), a negative one failed inside torch's SGD, unnamed
    for key, ok, rule in (("BASE_LR", lambda v: v > 0, "a finite number > 0"),
                          ("BIAS_LR_FACTOR", lambda v: v > 0, "a finite number > 0"),
                          ("MOMENTUM", lambda v: 0 <= v < 1, "a number in [0, 1)"),
                          ("WEIGHT_DECAY", lambda v: v >= 0, "a finite number >= 0"),
                          ("WEIGHT_DECAY_NORM", lambda v: v >= 0, "a finite number >= 0"),
                          ("WEIGHT_DECAY_BIAS", lambda v: v >= 0, "a finite number >= 0 (or None: WEIGHT_DECAY)"),
                          ("GAMMA", lambda v: v > 0, "a finite number > 0 (the factor at each of SOLVER.STEPS)"),
                          ("WARMUP_FACTOR", lambda v: 0 <= v <= 1, "a number in [0, 1]")):
        value = cfg.SOLVER.get(key)
        if value is None and key == "WEIGHT_DECAY_BIAS":  # Detectron2 main's default: WEIGHT_DECAY
            continue
        if not _finite(value) or not ok(value):
            problems.append(f"SOLVER.{key} {value!r}: {rule}")
    return problems


def log_weights_conventions(changes: dict, weights: str) -> None:
    """One INFO line per config value apply_weights_conventions changed."""
    for key, (old, new) in changes.items():
        logger.info(f"{key}: {old} -> {new} (from the metadata of MODEL.WEIGHTS {weights})")


def apply_weights_conventions(cfg: CN, *, log: bool = True) -> dict:
    """Set input format, pixel statistics and stride placement from MODEL.WEIGHTS' metadata (if it has any).

    Returns what changed (key -> (old, new)), which is also logged (log=False: by the caller, e.g. once log.txt
    exists). A detector checkpoint (resume, evaluation) carries no backbone metadata and leaves the config as it
    is.
    """
    changes: dict = {}
    if not (cfg.MODEL.BACKBONES.CONVENTIONS_FROM_WEIGHTS and cfg.MODEL.WEIGHTS):
        return changes
    from detectron2.utils.file_io import PathManager

    from backbones.pretrained import read_weights_file

    try:
        path = PathManager.get_local_path(cfg.MODEL.WEIGHTS)  # downloads detectron2:// and https:// URLs once
    except OSError as err:  # urllib's URLError is an OSError: offline, or no such address
        raise FileNotFoundError(f"MODEL.WEIGHTS {cfg.MODEL.WEIGHTS}: cannot download it ({err}); on a machine "
                                "without internet pass a local file, or MODEL.WEIGHTS \"\" to train from "
                                "scratch") from None
    if not os.path.isfile(path):
        raise FileNotFoundError(f"MODEL.WEIGHTS: no such file {cfg.MODEL.WEIGHTS!r}")
    weights = read_weights_file(path)
    if weights.is_detector:  # a full detector checkpoint: its config already matches
        return changes
    meta = weights.meta
    if meta.arch.get("family"):  # our checkpoints say how wide the net is (no "width": written before it existed)
        theirs, ours = float(meta.arch.get("width", 1.0)), float(cfg.MODEL.BACKBONES.WIDTH)
        if theirs != ours:
            raise ValueError(f"MODEL.WEIGHTS {cfg.MODEL.WEIGHTS} holds a {meta.arch.get('family')}"
                             f"{meta.arch.get('depth', '')} of width {theirs:g}, but MODEL.BACKBONES.WIDTH is "
                             f"{ours:g}: set MODEL.BACKBONES.WIDTH {theirs:g} to rebuild the net it was trained as")
    changes = set_conventions(cfg, meta)
    if log:
        log_weights_conventions(changes, f"{path}, format {weights.source_format}")
    return changes


def set_conventions(cfg: CN, meta) -> dict:
    """Input format, pixel statistics and stride placement of weights with metadata `meta` (a backbones
    WeightsMeta; None fields leave the config as it is); returns key -> (old, new) of what changed. The one rule of
    apply_weights_conventions and of the paper's design (detection.paper_design, for the column's known weights)."""
    changes: dict = {}

    def put(key: str, node: CN, attr: str, value) -> None:
        old = getattr(node, attr)
        if value is not None and type(old)(value) != old:
            setattr(node, attr, type(old)(value))
            changes[key] = (old, getattr(node, attr))

    put("INPUT.FORMAT", cfg.INPUT, "FORMAT", meta.input_format)
    put("MODEL.PIXEL_MEAN", cfg.MODEL, "PIXEL_MEAN", list(meta.pixel_mean) if meta.pixel_mean else None)
    put("MODEL.PIXEL_STD", cfg.MODEL, "PIXEL_STD", list(meta.pixel_std) if meta.pixel_std else None)
    from backbones import list_models, model_info

    name = cfg.MODEL.BACKBONES.NAME
    if name in list_models() and model_info(name).family in ("resnet", "plain"):  # the nets with a stride placement
        put("MODEL.BACKBONES.STRIDE_IN_1X1", cfg.MODEL.BACKBONES, "STRIDE_IN_1X1", meta.stride_in_1x1)
    mirror_detectron2_keys(cfg)  # MODEL.RESNETS.STRIDE_IN_1X1 records what runs
    return changes


MAX_BASE_CHAIN = 32  # _BASE_ files above a config; Detectron2's deepest is 2


def check_config_file(path: str, _chain: tuple[str, ...] = ()) -> None:
    """Read `path` and its `_BASE_` files with safe_yaml.load_yaml and refuse, naming the file, what fvcore would
    otherwise handle badly: tags that call Python (fvcore falls back to yaml.unsafe_load), duplicate keys, alias
    bombs, `_BASE_` cycles (RecursionError), syntax errors and non-mapping documents."""
    real = os.path.realpath(path)
    if len(_chain) >= MAX_BASE_CHAIN:  # fvcore merges _BASE_ files recursively: RecursionError, reported as nesting
        shown = [*_chain[:2], "...", *_chain[-1:], real]
        raise ConfigFileError(f"{_chain[0]}: a _BASE_ chain of more than {MAX_BASE_CHAIN} files "
                              f"({' -> '.join(shown)}); refused")
    if real in _chain:
        cycle = " -> ".join([*_chain[_chain.index(real):], real])
        raise ConfigFileError(f"{path}: _BASE_ cycle: {cycle}")
    if not os.path.isfile(path):
        where = f" (a _BASE_ of {_chain[-1]})" if _chain else ""
        raise FileNotFoundError(f"config file not found: {path}{where}")
    data = load_yaml(path)  # plain data, no duplicate keys, bounded size / depth / alias expansion
    if data is None:
        return
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: a config must be a mapping of keys, found a {type(data).__name__}")
    bases = data.get("_BASE_", [])
    for base in [bases] if isinstance(bases, str) else bases:
        if not isinstance(base, str):
            raise ConfigFileError(f"{path}: _BASE_ must be a file name or a list of them, got {base!r}")
        base = os.path.expanduser(base)
        if "://" in base:
            raise ConfigFileError(f"{path}: _BASE_ {base!r} is a URL; configs are read from local files only")
        check_config_file(base if os.path.isabs(base) else os.path.join(os.path.dirname(path), base),
                          (*_chain, real))


def get_detection_cfg(config_files: str | list[str] | None = None, opts: list[str] | None = None, *,
                      freeze: bool = True, read_weights: bool = True) -> CN:
    """Detectron2 defaults + our keys, then each YAML in order (each may have a `_BASE_`; later files overlay
    earlier ones), then KEY VALUE overrides, then the weights' conventions (read_weights=False: leave MODEL.WEIGHTS
    unread, e.g. on a host that only submits the job). An unknown key raises an error naming the key and the file."""
    cfg = add_backbones_config(get_cfg())
    for path in [config_files] if isinstance(config_files, str) else (config_files or []):
        check_config_file(path)
        try:
            cfg.merge_from_file(path, allow_unsafe=False)
        except KeyError as err:
            raise KeyError(f"{path}: {err.args[0] if err.args else err}") from None
    if opts:
        try:
            cfg.merge_from_list(list(opts))
        except (KeyError, AssertionError) as err:
            raise KeyError(f"command-line override: {err.args[0] if err.args else err}") from None
    cfg.OUTPUT_DIR = os.path.expanduser(str(cfg.OUTPUT_DIR))  # "~/runs/x" made a folder named "~" in the cwd
    files = [config_files] if isinstance(config_files, str) else list(config_files or [])
    # MODEL.BACKBONE.FREEZE_AT, MODEL.RESNETS.*: drive ours, yield to ours or are refused, then mirror what runs
    resolve_detectron2_keys(cfg, mentions(files, list(opts or [])))
    if read_weights:
        apply_weights_conventions(cfg)
    if freeze:
        cfg.freeze()
    return cfg
