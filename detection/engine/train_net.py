"""Detection training / evaluation entry points (the body of tools/train_det.py), with Detectron2's
train_net.py interface. Lives in the installed package so submitit can unpickle it on any node."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
from pathlib import Path

import torch
import yaml
from detectron2.engine import default_setup
from detectron2.utils import comm
from detectron2.utils.logger import setup_logger

from backbones.checkpoint_io import signals_deferred
from classification.engine.cli import USER_ERRORS, add_launch_arguments, check_process_count, user_errors
from classification.engine.launch import launch as launch_processes
from classification.engine.run_directory import claim_run_directory, last_checkpoint_file
from classification.engine.run_files import (
    CONFIG_YAML,
    LAST_CHECKPOINT,
    METRICS,
    PROGRESS,
    adopt_detectron2_layout,
)
from classification.engine.slurm import add_cluster_arguments, submit

from ..checkpoint import BackbonesCheckpointer
from ..config import apply_weights_conventions, check_run_config, get_detection_cfg, log_weights_conventions
from ..datasets import register_coco, register_voc
from ..detectron2_keys import MIRRORED_KEYS
from ..project import project_files
from ..safe_yaml import load_yaml
from .trainer import Trainer

__all__ = ["build_parser", "setup", "main", "launch", "run", "default_config_files"]

logger = logging.getLogger("detection.engine")
# What a --resume may change: the schedule's length and bookkeeping (extending a finished run), the weights (unused
# when resuming), where it runs.
# and Detectron2's keys that mirror ours: a run recorded before they were mirrored holds Detectron2's defaults there,
# while ours, compared, say what it built
RESUME_MAY_CHANGE = ("SOLVER.MAX_ITER", "SOLVER.STEPS", "SOLVER.CHECKPOINT_PERIOD", "TEST.EVAL_PERIOD", "MODEL.WEIGHTS",
                     "MODEL.DEVICE", "OUTPUT_DIR", "EVAL.FAST_INFERENCE", *sorted(MIRRORED_KEYS))


def default_config_files() -> list[str]:
    """No --config-file: ResNet-101 C4 (the paper's detector) on the embedded default dataset at smoke scale, from
    the checkout (detection.project: the one resolver of the repository's files)."""
    files = project_files(Path(__file__).parent, needed_by="train_det without --config-file reads its default "
                                                            "configs/")
    return [str(files.config("COCO-Detection", "faster_rcnn_R_101_C4.yaml")),
            str(files.config("Embedded-Detection", "smoke.yaml"))]


def build_parser(description: str = "Faster R-CNN with backbones from `backbones`") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config-file", action="append", default=None, metavar="FILE",
                   help="Detectron2 YAML; repeat to overlay (e.g. an architecture config, then "
                        "configs/Embedded-Detection/smoke.yaml). Default: R-101-C4 on the embedded dataset")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/last_checkpoint if present")
    p.add_argument("--eval-only", action="store_true", help="evaluate MODEL.WEIGHTS, no training")
    p.add_argument("--dataset-coco", nargs=3, action="append", default=[], metavar=("NAME", "JSON", "IMAGE_ROOT"),
                   help="register a COCO-format dataset under NAME (repeatable)")
    p.add_argument("--dataset-voc", nargs=3, action="append", default=[], metavar=("NAME", "DIR", "SPLIT"),
                   help="register a VOC-layout directory under NAME (repeatable); classes: --voc-classes")
    p.add_argument("--voc-classes", default=None, metavar="CLASS,CLASS,...",
                   help="class names of every --dataset-voc (default: PASCAL VOC's 20 for VOC* directories, else "
                        "the classes found in the split's annotations)")
    p.add_argument("opts", nargs=argparse.REMAINDER, default=[],
                   help="KEY VALUE config overrides (last, after every --flag)")
    add_launch_arguments(p)
    add_cluster_arguments(p)
    return p


def register_cli_datasets(args: argparse.Namespace) -> None:
    from ..datasets.validation import dataset_name_problem

    seen: dict[str, str] = {}
    for flag, entries in (("--dataset-coco", args.dataset_coco), ("--dataset-voc", args.dataset_voc)):
        for name, *_ in entries:
            if why := dataset_name_problem(name):
                raise ValueError(f"{flag} {name!r}: {why}")
            if name in seen:  # the second registration replaced the first: one name, two datasets
                raise ValueError(f"{flag} {name!r}: the name is given twice ({seen[name]} and {flag}); a dataset "
                                 "name is one dataset")
            seen[name] = flag
    for name, json_file, image_root in args.dataset_coco:
        register_coco(name, json_file, image_root)
    classes = [c.strip() for c in args.voc_classes.split(",") if c.strip()] if args.voc_classes else None
    if classes is not None:
        from ..datasets.validation import DatasetFormatError, check_class_names

        try:
            check_class_names(classes, f"--voc-classes {args.voc_classes!r}")
        except DatasetFormatError as err:  # a repeated name scored its second index as all false positives
            raise ValueError(str(err)) from None
    for name, dirname, split in args.dataset_voc:
        register_voc(name, dirname, split, class_names=classes)


def config_overrides(opts: list[str]) -> list[str]:
    """The KEY VALUE pairs after the flags, or a SystemExit that says what is wrong with them."""
    opts = list(opts)
    if opts and opts[0] == "--":
        opts = opts[1:]
    flags = [o for o in opts if o.startswith("--")]
    if flags:
        raise SystemExit(f"error: {flags[0]} appears among the KEY VALUE config overrides; every --flag must come "
                         "before the first KEY (overrides go last)")
    if len(opts) % 2:
        raise SystemExit(f"error: config overrides must be KEY VALUE pairs, got an odd number ({len(opts)}): {opts}")
    keys = opts[::2]
    bad = [k for k in keys if k.upper() != k or not k[:1].isalpha()]
    if bad:
        raise SystemExit(f"error: {bad[0]!r} is not a config key (KEY VALUE pairs such as SOLVER.MAX_ITER 1000). "
                         "--dataset-voc takes exactly NAME DIR SPLIT; give its classes with --voc-classes a,b,c")
    return opts


class _NoUserErrorTraceback(logging.Filter):
    """Keeps the traceback Detectron2's training loop logs for an exception ("Exception during training:") off the
    terminal when the error is caused by the input (USER_ERRORS: an unreadable image, a recorded size the image
    does not have, divergence, ...): the entry point prints it as one line. log.txt keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], USER_ERRORS))


class _PlainText(logging.Filter):
    """Strips terminal colour codes from a record's message: default_setup logs the full config through pygments'
    YAML highlighter, which put ~300 lines of ANSI escapes into log.txt and every captured stage log."""

    ANSI = re.compile(r"\x1b\[[0-9;]*m")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "\x1b[" in message:
            record.msg, record.args = self.ANSI.sub("", message), None
        return True


def _plain_detectron2_messages() -> None:
    """Before default_setup logs the config: _PlainText on Detectron2's logger (once per process)."""
    d2 = logging.getLogger("detectron2")
    if not any(isinstance(f, _PlainText) for f in d2.filters):
        d2.addFilter(_PlainText())


def _log_into_run(output_dir: str, debug: bool = False) -> None:
    """Our loggers (detection.*, classification.*, backbones.*: box clipping, conventions from the weights, the
    traceback behind a one-line error) into log.txt and the terminal, as default_setup does for Detectron2's.
    The terminal gets INFO and above: Detectron2's handler shows DEBUG, and the traceback kept for log.txt would
    undo the one-line error (as would Detectron2's own, unless --debug)."""
    import sys

    for name in ("detection", "classification", "backbones"):
        for handler in setup_logger(output_dir, distributed_rank=comm.get_rank(), name=name).handlers:
            if getattr(handler, "stream", None) is sys.stdout:
                handler.setLevel(logging.INFO)
    for handler in logging.getLogger("detectron2").handlers:  # default_setup's terminal handler (rank 0)
        if getattr(handler, "stream", None) is sys.stdout:
            for old in [f for f in handler.filters if isinstance(f, _NoUserErrorTraceback)]:
                handler.removeFilter(old)  # setup_logger keeps one handler per process: set it per run
            if not debug:
                handler.addFilter(_NoUserErrorTraceback())


def setup(args: argparse.Namespace):
    """Config from file + overrides (+ the weights' conventions), datasets, logging, OUTPUT_DIR/config.yaml."""
    register_cli_datasets(args)  # in every process: spawned workers do not inherit registrations
    cfg = get_detection_cfg(args.config_file or default_config_files(), config_overrides(args.opts), freeze=False,
                            read_weights=False)
    conventions = apply_weights_conventions(cfg, log=False)  # logged below, once log.txt is the run's
    cfg.MODEL.DEVICE = cfg.MODEL.DEVICE if torch.cuda.is_available() else "cpu"  # the same config on a laptop
    if not args.eval_only:  # the linear scaling rule (SOLVER.REFERENCE_WORLD_SIZE) applied before config.yaml is
        cfg = Trainer.auto_scale_workers(cfg, comm.get_world_size())  # written: it records what trains (then a no-op
        #                                                                in DefaultTrainer's constructor)
    cfg.freeze()
    check_run_config(cfg, training=not args.eval_only)
    if args.eval_only and not cfg.MODEL.WEIGHTS and not (
            args.resume and os.path.isfile(os.path.join(cfg.OUTPUT_DIR, LAST_CHECKPOINT))):
        raise SystemExit("error: --eval-only needs trained weights: MODEL.WEIGHTS path/to/model_final.pth (or "
                         "--resume with an OUTPUT_DIR that holds a checkpoint); it would evaluate a random model")
    # before anything is written (default_setup rewrites config.yaml): one writer, no overwrite, same settings
    recorded = os.path.join(cfg.OUTPUT_DIR, CONFIG_YAML)
    claim_run_directory(cfg.OUTPUT_DIR, resume=args.resume, writer=comm.get_rank() == 0,
                        recorded=(load_yaml(recorded) or {}) if args.resume and not args.eval_only
                        and os.path.isfile(recorded) else None,
                        now=yaml.safe_load(cfg.dump()), may_change=RESUME_MAY_CHANGE, source=recorded,
                        what="evaluate into it" if args.eval_only else "train into it")
    if args.resume:
        last_checkpoint_file(cfg.OUTPUT_DIR)  # a ValueError now if it names nothing usable, before config.yaml
    # logging, collect_env, OUTPUT_DIR/config.yaml, seeds (it prints one config file; we may have several). A
    # preemption signal is handled after it: submitit's requeue exit, raised inside Detectron2 main's
    # OmegaConf.create(cfg.dump()), became omegaconf's ConfigKeyError and the job failed instead of requeueing
    _plain_detectron2_messages()
    with signals_deferred():
        default_setup(cfg, argparse.Namespace(**{**vars(args), "config_file": ""}))
    _log_into_run(cfg.OUTPUT_DIR, getattr(args, "debug", False))
    logger.info(f"config files: {args.config_file or default_config_files()}")
    log_weights_conventions(conventions, cfg.MODEL.WEIGHTS)
    return cfg


def main(args: argparse.Namespace):
    cfg = setup(args)
    if comm.is_main_process():  # a run written before 2026-12-06, continued: one layout in one directory
        adopt_detectron2_layout(cfg.OUTPUT_DIR)
    if args.eval_only:
        model = Trainer.build_model(cfg)
        checkpointer = BackbonesCheckpointer(model, save_dir=cfg.OUTPUT_DIR)
        # --resume: the run's own last checkpoint (run() refuses MODEL.WEIGHTS beside it); else MODEL.WEIGHTS
        path = checkpointer.get_checkpoint_file() if args.resume and checkpointer.has_checkpoint() else \
            cfg.MODEL.WEIGHTS
        checkpointer.load_for_evaluation(path, datasets=tuple(cfg.DATASETS.TEST))
        return Trainer.test(cfg, model)
    if comm.is_main_process() and not (args.resume and os.path.isfile(os.path.join(cfg.OUTPUT_DIR, LAST_CHECKPOINT))):
        # training starts at iteration 0: the per-iteration log of a run killed before its first checkpoint goes,
        # so the two runs' iterations do not mix in one metrics.json (the report plots it)
        for name in (METRICS, PROGRESS):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(cfg.OUTPUT_DIR, name))
    trainer = Trainer(cfg)
    trainer.resume_or_load(resume=args.resume)
    return trainer.train()


def _set_d2_local_group(local_rank: int, group) -> None:
    """Give Detectron2's comm.get_local_rank() its per-machine group (its own launch() would have made it)."""
    if hasattr(comm, "create_local_process_group"):  # Detectron2 main: the public way (collective, every worker)
        comm.create_local_process_group(torch.distributed.get_world_size(group))
    else:  # 0.6 has no API for it: set what its launch() sets
        comm._LOCAL_PROCESS_GROUP = group


def launch(args: argparse.Namespace):
    """Run `main(args)` on this machine: Detectron2's launch on GPUs, our gloo launcher on CPUs."""
    if torch.cuda.is_available():
        from detectron2.engine import launch as d2_launch

        return d2_launch(main, args.num_gpus, num_machines=args.num_machines, machine_rank=args.machine_rank,
                         dist_url=args.dist_url, args=(args,))
    return launch_processes(main, args.num_gpus, args.num_machines, args.machine_rank, args.dist_url, args=(args,),
                            worker_init=_set_d2_local_group)


def run(argv: list[str] | None = None):
    """Parse the command line; submit to Slurm with --slurm, else run here. Errors caused by the input (a missing
    or hostile file, an unknown key, unusable weights or images, ...) print one line naming the problem; the
    traceback goes to OUTPUT_DIR/log.txt and, with --debug, to the terminal."""
    args = build_parser().parse_args(argv)
    with user_errors(args.debug):
        if args.eval_only and args.resume and "MODEL.WEIGHTS" in config_overrides(args.opts)[::2]:
            raise SystemExit("error: --eval-only --resume evaluates OUTPUT_DIR's last checkpoint, and MODEL.WEIGHTS "
                             "would be ignored (and recorded as if used): pass one of them")
        if args.slurm:
            # The submitting host only needs OUTPUT_DIR: the weights are read on the cluster, not here.
            cfg = get_detection_cfg(args.config_file or default_config_files(), config_overrides(args.opts),
                                    freeze=True, read_weights=False)
            job = submit(launch, args, output_dir=cfg.OUTPUT_DIR, job_name="train_det")
            print(f"submitted {job.job_id}")
            return job
        if comm.get_world_size() > 1:
            raise SystemExit("run() must be called outside a process group")
        check_process_count(args.num_gpus)
        return launch(args)
