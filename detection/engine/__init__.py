"""Detection training and evaluation: the trainer, its data loading and optimizer, the command line (train_net), the
main job. Process launch, Slurm submission, the run-directory rules and the command-line error convention are
classification.engine's (launch, slurm, run_directory, cli): the layer below, shared by both pipelines."""

from .train_net import build_parser, launch, main, run, setup
from .trainer import Trainer, create_ddp_model, write_evaluation

__all__ = ["Trainer", "create_ddp_model", "write_evaluation", "build_parser", "setup", "main", "launch", "run"]
