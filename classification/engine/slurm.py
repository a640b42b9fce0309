"""Slurm submission through submitit, shared by tools/train_det.py and tools/train_cls.py.

One submitit task per node; each task runs `entry(args)` with `args.num_machines`, `args.machine_rank` and a
tcp `args.dist_url` on the first node filled in, and `entry` spawns one worker per GPU. When Slurm preempts or
times out the job, submitit calls `checkpoint()`, which resubmits the same job with `args.resume = True`, so it
continues from the last checkpoint; after `max_requeues` requeues it stops with a message saying so.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_cluster_arguments", "SubmititJob", "submit", "port_for_job"]

logger = logging.getLogger(__name__)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("cluster (Slurm via submitit)")
    g.add_argument("--slurm", "--submit", dest="slurm", action="store_true", help="submit instead of running here")
    g.add_argument("--nodes", type=int, default=1, help="machines (one submitit task each)")
    g.add_argument("--gpus-per-node", type=int, default=8, help="GPUs, hence worker processes, per node")
    g.add_argument("--cpus-per-gpu", type=int, default=10)
    g.add_argument("--partition", default=None)
    g.add_argument("--timeout", type=int, default=72 * 60, help="minutes per allocation (requeued after)")
    g.add_argument("--job-dir", default=None, help="submitit logs and pickles (default: OUTPUT_DIR/submitit)")
    g.add_argument("--account", default=None)
    g.add_argument("--constraint", default=None)
    g.add_argument("--comment", default=None)
    g.add_argument("--mem", type=int, default=None, help="GB per node (default: the partition's)")
    g.add_argument("--max-requeues", type=int, default=20, help="stop after this many preemptions/timeouts")
    g.add_argument("--signal-delay", type=int, default=120,
                   help="seconds before the time limit at which the job is signalled to checkpoint and requeue")
    g.add_argument("--cluster", default=None, choices=["slurm", "local", "debug"],
                   help="submitit backend (default: slurm if available); 'local' runs the job as a local process")
    return parser


def port_for_job(job_id: str) -> int:
    """A port every node derives the same way from the job id, away from the ephemeral range."""
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    return 20000 + int(digits[-6:]) % 20000


class SubmititJob:
    """The callable submitit pickles. `entry` must be importable (a module-level function of an installed
    package), so a requeued job finds it after a code checkout changes tools/."""

    def __init__(self, entry: Callable[[argparse.Namespace], Any], args: argparse.Namespace, *,
                 requeues: int = 0, max_requeues: int = 20):
        self.entry, self.args, self.requeues, self.max_requeues = entry, args, requeues, max_requeues

    def __call__(self) -> Any:
        import submitit

        env = submitit.JobEnvironment()
        args = copy.deepcopy(self.args)
        args.num_machines, args.machine_rank = env.num_nodes, env.node
        args.dist_url = f"tcp://{env.hostnames[0]}:{port_for_job(env.job_id)}" if env.num_nodes > 1 else "auto"
        if self.requeues:
            args.resume = True
            logger.warning(f"requeue {self.requeues}/{self.max_requeues}: resuming from the last checkpoint")
        return self.entry(args)

    def checkpoint(self):
        import submitit

        if self.requeues >= self.max_requeues:
            logger.error(f"not requeuing: this job was already requeued {self.requeues} times (--max-requeues "
                         f"{self.max_requeues}); resume it by hand with --resume")
            return None
        args = copy.deepcopy(self.args)
        args.resume = True
        return submitit.helpers.DelayedSubmission(
            SubmititJob(self.entry, args, requeues=self.requeues + 1, max_requeues=self.max_requeues))


def submit(entry: Callable[[argparse.Namespace], Any], args: argparse.Namespace, *, output_dir: str,
           job_name: str):
    """Submit `entry(args)` with the cluster options in `args`; returns the submitit job."""
    import submitit

    folder = Path(args.job_dir or os.path.join(output_dir, "submitit")) / "%j"
    # submitit's own bound on timeouts, on top of ours on all requeues (SubmititJob.checkpoint)
    executor = submitit.AutoExecutor(folder=folder, cluster=args.cluster, slurm_max_num_timeout=args.max_requeues,
                                     local_max_num_timeout=args.max_requeues)
    if args.cluster is None and executor.cluster != "slurm":  # submitit would silently run it here instead
        raise SystemExit("error: --slurm: this machine has no Slurm (no sbatch found); pass --cluster local to run "
                         "the job as a local submitit process, or drop --slurm to run it directly")
    gpus = args.gpus_per_node if executor.cluster == "slurm" or _has_cuda() else 0
    params: dict[str, Any] = dict(name=job_name, nodes=args.nodes, tasks_per_node=1, timeout_min=args.timeout,
                                  gpus_per_node=gpus, cpus_per_task=args.cpus_per_gpu * max(1, gpus))
    if args.mem:
        params["mem_gb"] = args.mem
    if executor.cluster == "slurm":
        slurm = {"slurm_partition": args.partition, "slurm_account": args.account,
                 "slurm_constraint": args.constraint, "slurm_comment": args.comment}
        params.update({k: v for k, v in slurm.items() if v is not None})
        params["slurm_signal_delay_s"] = args.signal_delay
    executor.update_parameters(**params)
    if executor.cluster == "local":  # LocalExecutor takes it, AutoExecutor does not forward it
        executor._executor.update_parameters(signal_delay_s=args.signal_delay)
    args = copy.deepcopy(args)
    args.slurm = False
    job = executor.submit(SubmititJob(entry, args, max_requeues=args.max_requeues))
    logger.info(f"submitted job {job.job_id}; logs in {str(folder).replace('%j', str(job.job_id))}")
    return job


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
