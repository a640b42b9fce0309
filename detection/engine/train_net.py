"""Detection training / evaluation entry points (the body of tools/train_det.py), with Detectron2's
train_net.py interface. Lives in the installed package so submitit can unpickle it on any node."""

from __future__ import annotations

import argparse
import logging
import os

import torch
from detectron2.engine import default_setup
from detectron2.utils import comm

from classification.engine.launch import launch as launch_processes
from classification.engine.slurm import add_cluster_arguments, submit

from ..checkpoint import BackbonesCheckpointer
from ..config import get_detection_cfg
from ..datasets import register_coco, register_voc
from .trainer import Trainer

__all__ = ["build_parser", "setup", "main", "launch", "run", "DEFAULT_CONFIG"]

logger = logging.getLogger("detection.engine")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# No --config-file: ResNet-101 C4 (the paper's detector) on the embedded default dataset at smoke scale.
DEFAULT_CONFIG = [os.path.join(REPO_ROOT, "configs", "COCO-Detection", "faster_rcnn_R_101_C4.yaml"),
                  os.path.join(REPO_ROOT, "configs", "Embedded-Detection", "smoke.yaml")]


def build_parser(description: str = "Faster R-CNN with backbones from `backbones`") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config-file", action="append", default=None, metavar="FILE",
                   help="Detectron2 YAML; repeat to overlay (e.g. an architecture config, then "
                        "configs/Embedded-Detection/smoke.yaml). Default: R-101-C4 on the embedded dataset")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/last_checkpoint if present")
    p.add_argument("--eval-only", action="store_true", help="evaluate MODEL.WEIGHTS, no training")
    p.add_argument("--num-gpus", type=int, default=1,
                   help="processes per machine: one per GPU; on a machine without GPUs, CPU processes (gloo)")
    p.add_argument("--num-machines", type=int, default=1)
    p.add_argument("--machine-rank", type=int, default=0)
    p.add_argument("--dist-url", default="auto", help="tcp://HOST:PORT of machine 0 ('auto': a free local port)")
    p.add_argument("--dataset-coco", nargs=3, action="append", default=[], metavar=("NAME", "JSON", "IMAGE_ROOT"),
                   help="register a COCO-format dataset under NAME (repeatable)")
    p.add_argument("--dataset-voc", nargs="+", action="append", default=[], metavar="NAME DIR SPLIT [CLASS ...]",
                   help="register a VOC-layout directory: NAME DIR SPLIT [class names...] (repeatable)")
    p.add_argument("opts", nargs=argparse.REMAINDER, default=[], help="KEY VALUE config overrides")
    add_cluster_arguments(p)
    return p


def register_cli_datasets(args: argparse.Namespace) -> None:
    for name, json_file, image_root in args.dataset_coco:
        register_coco(name, json_file, image_root)
    for spec in args.dataset_voc:
        if len(spec) < 3:
            raise SystemExit(f"--dataset-voc needs NAME DIR SPLIT [classes...], got {spec}")
        register_voc(spec[0], spec[1], spec[2], class_names=spec[3:] or None)


def setup(args: argparse.Namespace):
    """Config from file + overrides (+ the weights' conventions), datasets, logging, OUTPUT_DIR/config.yaml."""
    register_cli_datasets(args)  # in every process: spawned workers do not inherit registrations
    opts = list(args.opts)
    if opts and opts[0] == "--":
        opts = opts[1:]
    if len(opts) % 2:
        raise SystemExit(f"config overrides must be KEY VALUE pairs, got an odd number: {opts}")
    cfg = get_detection_cfg(args.config_file or DEFAULT_CONFIG, opts, freeze=False)
    cfg.MODEL.DEVICE = cfg.MODEL.DEVICE if torch.cuda.is_available() else "cpu"  # the same config on a laptop
    cfg.freeze()
    # logging, collect_env, OUTPUT_DIR/config.yaml, seeds (it prints one config file; we may have several)
    default_setup(cfg, argparse.Namespace(**{**vars(args), "config_file": ""}))
    logger.info(f"config files: {args.config_file or DEFAULT_CONFIG}")
    return cfg


def main(args: argparse.Namespace):
    cfg = setup(args)
    if args.eval_only:
        model = Trainer.build_model(cfg)
        BackbonesCheckpointer(model, save_dir=cfg.OUTPUT_DIR).resume_or_load(cfg.MODEL.WEIGHTS, resume=args.resume)
        return Trainer.test(cfg, model)
    trainer = Trainer(cfg)
    trainer.resume_or_load(resume=args.resume)
    return trainer.train()


def _set_d2_local_group(local_rank: int, group) -> None:
    comm._LOCAL_PROCESS_GROUP = group  # what detectron2.engine.launch sets for comm.get_local_rank()


def launch(args: argparse.Namespace):
    """Run `main(args)` on this machine: Detectron2's launch on GPUs, our gloo launcher on CPUs."""
    if torch.cuda.is_available():
        from detectron2.engine import launch as d2_launch

        return d2_launch(main, args.num_gpus, num_machines=args.num_machines, machine_rank=args.machine_rank,
                         dist_url=args.dist_url, args=(args,))
    return launch_processes(main, args.num_gpus, args.num_machines, args.machine_rank, args.dist_url, args=(args,),
                            worker_init=_set_d2_local_group)


def run(argv: list[str] | None = None):
    """Parse the command line; submit to Slurm with --slurm, else run here."""
    args = build_parser().parse_args(argv)
    if args.slurm:
        cfg = get_detection_cfg(args.config_file or DEFAULT_CONFIG, [o for o in args.opts if o != "--"],
                                freeze=True)
        if args.cluster in (None, "slurm"):
            args.num_gpus = args.gpus_per_node  # one worker per GPU of each node
        job = submit(launch, args, output_dir=cfg.OUTPUT_DIR, job_name="train_det")
        print(f"submitted {job.job_id}")
        return job
    if comm.get_world_size() > 1:
        raise SystemExit("run() must be called outside a process group")
    return launch(args)
