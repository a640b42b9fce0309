"""Training and evaluation: the trainer, local multi-process launch, Slurm submission."""

from .train_net import build_parser, launch, main, run, setup
from .trainer import Trainer, create_ddp_model, write_metrics

__all__ = ["Trainer", "create_ddp_model", "write_metrics", "build_parser", "setup", "main", "launch", "run"]
