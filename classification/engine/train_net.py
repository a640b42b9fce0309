"""tools/train_cls.py's body: the same local / multi-process / Slurm interface as tools/train_det.py, sharing its
launcher (classification.engine.launch), submission (classification.engine.slurm) and error handling
(classification.engine.cli). The run's options are generated from ClsConfig (classification.engine.config)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch

from .cli import add_launch_arguments, check_process_count, user_errors
from .config import add_config_arguments, config_from_args
from .errors import UsageError
from .launch import launch as launch_processes
from .run_directory import claim_run_directory, last_checkpoint_file
from .run_files import CONFIG_JSON, RunFileError, earlier_augmentation, earlier_augmentation_text, read_json
from .slurm import add_cluster_arguments, submit
from .trainer import recorded_settings, train

__all__ = ["build_parser", "config_from_args", "main", "launch", "run"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="ImageNet-style pretraining of a `backbones` model (paper recipe)")
    add_config_arguments(p)
    p.add_argument("--resume", action="store_true",
                   help="continue from OUTPUT_DIR/last_checkpoint (without it, an existing run directory is refused)")
    add_launch_arguments(p)
    add_cluster_arguments(p)
    return p


def main(args: argparse.Namespace) -> dict:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s")
    cfg = config_from_args(args)
    out = Path(cfg.output_dir)
    recorded = out / CONFIG_JSON
    before = _recorded_config(recorded) if args.resume and recorded.is_file() else None
    if before is not None and earlier_augmentation(before):  # the user changed nothing: say what did
        raise UsageError(f"--resume: {earlier_augmentation_text(out)}: resumed, its crops would change mid-run. Start "
                         "it again in a new output directory")
    claim_run_directory(out, resume=args.resume, flag="--output-dir",
                        writer=not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0,
                        recorded=before, now=recorded_settings(cfg), source=str(recorded),
                        may_change=("iterations", "eval_period", "checkpoint_period", "keep_checkpoints", "output_dir",
                                    "workers", "fast_inference"))
    if args.resume:
        last_checkpoint_file(out)  # a ValueError now if it names nothing usable, before config.json is rewritten
    result = train(cfg)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(json.dumps({"final": result["final"], "checkpoint": result["checkpoint"],
                          "seconds": result["seconds"]}))
    return result


def _recorded_config(path: Path) -> dict:
    """The settings a run recorded (config.json), or a ValueError naming the file."""
    try:
        recorded = read_json(path)  # run_files' reader: a regular file, bounded
    except RunFileError as err:
        raise ValueError(f"{err}; --resume compares the settings with it") from None
    if not isinstance(recorded, dict):
        raise ValueError(f"{path}: a JSON {type(recorded).__name__}, not the settings object a run writes")
    return recorded


def launch(args: argparse.Namespace):
    return launch_processes(main, args.num_gpus, args.num_machines, args.machine_rank, args.dist_url, args=(args,))


def run(argv: list[str] | None = None):
    args = build_parser().parse_args(argv)
    with user_errors(args.debug):
        cfg = config_from_args(args)  # validate here, not in a worker or on a cluster node
        if args.slurm:
            job = submit(launch, args, output_dir=cfg.output_dir, job_name="train_cls")
            print(f"submitted {job.job_id}")
            return job
        check_process_count(args.num_gpus)
        return launch(args)
