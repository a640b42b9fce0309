"""tools/train_cls.py's body: the same local / multi-process / Slurm interface as tools/train_det.py, sharing its
launcher (classification.engine.launch) and submission code (classification.engine.slurm)."""

from __future__ import annotations

import argparse
import json
import logging

import torch

from backbones.registry import parse_model_option

from .launch import launch as launch_processes
from .slurm import add_cluster_arguments, submit
from .trainer import ClsConfig, train

__all__ = ["build_parser", "config_from_args", "main", "launch", "run"]


def _option(text: str):
    try:
        return parse_model_option(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="ImageNet-style pretraining of a `backbones` model (paper recipe)")
    d = ClsConfig()
    p.add_argument("--model", default=d.model, help="backbones.list_models() name")
    p.add_argument("--model-option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                   help="e.g. shortcut=A, preact=True, norm=GN (repeatable)")
    p.add_argument("--dataset", default=d.dataset, choices=["embedded", "fashion-mnist", "cifar10", "imagefolder"])
    p.add_argument("--data-root", default=None)
    p.add_argument("--image-size", type=int, default=d.image_size, help="embedded dataset image size")
    p.add_argument("--train-samples", type=int, default=None)
    p.add_argument("--val-samples", type=int, default=None)
    p.add_argument("--iterations", type=int, default=d.iterations)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per process")
    p.add_argument("--lr", type=float, default=None, help="default 0.1 x global batch / 256")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--schedule", default=d.schedule, choices=["step", "plateau"])
    p.add_argument("--milestones", type=float, nargs="+", default=list(d.milestones))
    p.add_argument("--warmup-iterations", type=int, default=0)
    p.add_argument("--warmup-until-error", type=float, default=None,
                   help="paper's ResNet-110 trick: lr x warmup-factor until training error < this (e.g. 0.8)")
    p.add_argument("--warmup-factor", type=float, default=d.warmup_factor)
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--eval-period", type=int, default=d.eval_period)
    p.add_argument("--checkpoint-period", type=int, default=d.checkpoint_period)
    p.add_argument("--ten-crop", action="store_true", help="10-crop evaluation (imagefolder datasets)")
    p.add_argument("--skip-corrupt", action="store_true", help="skip (and count) unreadable images instead of failing")
    p.add_argument("--no-amp", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--output-dir", default=None, help="default output/classification/<dataset>_<model>")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUTPUT_DIR/last_checkpoint (without it, an existing run directory is refused)")
    p.add_argument("--num-gpus", type=int, default=1, help="processes per machine (GPUs; CPU processes with gloo)")
    p.add_argument("--num-machines", type=int, default=1)
    p.add_argument("--machine-rank", type=int, default=0)
    p.add_argument("--dist-url", default="auto")
    add_cluster_arguments(p)
    return p


def config_from_args(args: argparse.Namespace) -> ClsConfig:
    return ClsConfig(
        model=args.model, model_options=dict(args.model_option), dataset=args.dataset, data_root=args.data_root,
        image_size=args.image_size, train_samples=args.train_samples, val_samples=args.val_samples,
        iterations=args.iterations, batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
        schedule=args.schedule, milestones=tuple(args.milestones), warmup_iterations=args.warmup_iterations,
        warmup_factor=args.warmup_factor, warmup_until_error=args.warmup_until_error, amp=not args.no_amp,
        workers=args.workers, eval_period=args.eval_period, checkpoint_period=args.checkpoint_period,
        ten_crop=args.ten_crop, on_error="skip" if args.skip_corrupt else "raise", seed=args.seed,
        deterministic=args.deterministic,
        output_dir=args.output_dir or f"output/classification/{args.dataset}_{args.model}")


def main(args: argparse.Namespace) -> dict:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s")
    cfg = config_from_args(args)
    from pathlib import Path

    out = Path(cfg.output_dir)
    if (out / "last_checkpoint").is_file() and not args.resume:
        raise SystemExit(f"{out} already holds a run; pass --resume to continue it or choose another --output-dir")
    result = train(cfg)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(json.dumps({"final": result["final"], "checkpoint": result["checkpoint"],
                          "seconds": result["seconds"]}))
    return result


def launch(args: argparse.Namespace):
    return launch_processes(main, args.num_gpus, args.num_machines, args.machine_rank, args.dist_url, args=(args,))


def run(argv: list[str] | None = None):
    args = build_parser().parse_args(argv)
    if args.slurm:
        if args.cluster in (None, "slurm"):
            args.num_gpus = args.gpus_per_node
        job = submit(launch, args, output_dir=config_from_args(args).output_dir, job_name="train_cls")
        print(f"submitted {job.job_id}")
        return job
    return launch(args)
