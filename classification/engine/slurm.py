"""Slurm submission through submitit, shared by tools/train_det.py and tools/train_cls.py.

One submitit task per node; each task runs `entry(args)` with `args.num_machines`, `args.machine_rank` and a
tcp `args.dist_url` on the first node filled in, and `entry` spawns `--tasks-per-node` training processes (one
per GPU by default; `--gpus-per-node 0` on a CPU partition). A request the partition cannot satisfy (more CPUs,
GPUs or nodes than it has) is refused at submission, not left pending forever.

Preemption and time limits: submitit's USR2 handler calls `checkpoint()`, which resubmits the same job with
`args.resume = True`; after `max_requeues` requeues it stops with a message saying so. A requeue done by Slurm
itself (`scontrol requeue`, node failure, preemption without the signal) re-runs the original submission; it is
recognised by SLURM_RESTART_COUNT > 0 and resumes too. Only the submitit task handles USR2: the training
processes it spawns and every forked data-loader worker ignore it (Slurm signals every process of the job).
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError

__all__ = ["add_cluster_arguments", "SubmititJob", "submit", "submit_to", "port_for_job", "workers_per_node",
           "ignore_preemption_signal", "PartitionLimits", "partition_limits", "check_request"]

logger = logging.getLogger(__name__)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("cluster (Slurm via submitit)")
    g.add_argument("--slurm", "--submit", dest="slurm", action="store_true", help="submit instead of running here")
    g.add_argument("--nodes", type=int, default=1, help="machines (one submitit task each)")
    g.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (0 on a CPU partition)")
    g.add_argument("--tasks-per-node", type=int, default=None,
                   help="training processes per node (default: one per GPU; 1 with --gpus-per-node 0)")
    g.add_argument("--cpus-per-gpu", type=int, default=10, help="CPUs per GPU (the default --cpus-per-task)")
    g.add_argument("--cpus-per-task", type=int, default=None,
                   help="CPUs of each node's task, which runs that node's training processes (default: "
                        "--cpus-per-gpu x GPUs; with --gpus-per-node 0, one per training process)")
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


def workers_per_node(args: argparse.Namespace) -> int:
    """Training processes per node: --tasks-per-node, else one per GPU (1 on a CPU partition)."""
    gpus, tasks = args.gpus_per_node, args.tasks_per_node
    if gpus < 0 or (tasks is not None and tasks < 1) or args.nodes < 1:
        raise UsageError(f"--nodes {args.nodes} --gpus-per-node {gpus} --tasks-per-node {tasks}: need at "
                         "least one node and one training process, and no negative GPU count")
    if tasks is None:
        return gpus if gpus > 0 else 1
    if gpus > 0 and tasks > gpus:
        raise UsageError(f"--tasks-per-node {tasks} > --gpus-per-node {gpus}: one training process per "
                         "GPU at most (use --gpus-per-node 0 for CPU processes)")
    return tasks


def ignore_preemption_signal() -> None:
    """USR2 means "checkpoint and requeue" to submitit's handler in the job's task; any other process of the job
    (spawned trainers, data-loader workers) ignores it instead of dying or requeueing a second time."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


@dataclass(frozen=True)
class PartitionLimits:
    name: str
    nodes: int
    cpus_per_node: int
    gpus_per_node: int


def partition_limits(partition: str | None) -> PartitionLimits | None:
    """What a node of `partition` (default: the cluster's default partition) has, from `sinfo`; None if unknown."""
    cmd = ["sinfo", "-h", "-o", "%P|%D|%c|%G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.split("|") for ln in out.stdout.splitlines() if ln.count("|") == 3]
    if out.returncode != 0 or not lines:
        return None
    if not partition:
        lines = [ln for ln in lines if ln[0].endswith("*")] or lines[:1]
    name, nodes, cpus, gres = lines[0]
    gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(]+)?:(\d+)", gres))
    return PartitionLimits(name.rstrip("*"), sum(int(ln[1]) for ln in lines if ln[0] == name),
                           int(re.match(r"\d+", cpus).group()), gpus)


def check_request(limits: PartitionLimits, nodes: int, cpus: int, gpus: int) -> None:
    """Refuse a request no node of the partition can satisfy: Slurm would accept it and leave it pending forever
    (Reason=PartitionConfig)."""
    problems = []
    if nodes > limits.nodes:
        problems.append(f"{nodes} nodes (it has {limits.nodes}; --nodes)")
    if cpus > limits.cpus_per_node:
        problems.append(f"{cpus} CPUs per node (a node has {limits.cpus_per_node}; --cpus-per-task, or "
                        "--cpus-per-gpu x --gpus-per-node)")
    if gpus > limits.gpus_per_node:
        problems.append(f"{gpus} GPUs per node (a node has {limits.gpus_per_node}; --gpus-per-node, 0 on a CPU "
                        "partition)")
    if problems:
        raise UsageError(f"--slurm: partition {limits.name} cannot run this job, which asks for "
                         f"{'; '.join(problems)}. Slurm would accept it and leave it pending forever "
                         "(Reason=PartitionConfig); not submitted")


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

    def __getstate__(self) -> dict:  # the entry by name: unpickling it would import Detectron2 (and fvcore) at once
        state = dict(self.__dict__)
        entry = state.pop("entry")
        state["entry_name"] = (entry.__module__, entry.__qualname__)
        return state

    def __setstate__(self, state: dict) -> None:  # in the job, before its first import of fvcore
        import importlib

        from .cli import hide_third_party_warnings

        hide_third_party_warnings()
        state = dict(state)
        module, name = state.pop("entry_name")
        self.__dict__.update(state)
        self.entry = getattr(importlib.import_module(module), name)

    def __call__(self) -> Any:
        import submitit

        env = submitit.JobEnvironment()
        os.register_at_fork(after_in_child=ignore_preemption_signal)  # data-loader workers forked from here
        args = copy.deepcopy(self.args)
        args.num_machines, args.machine_rank = env.num_nodes, env.node
        args.dist_url = f"tcp://{env.hostnames[0]}:{port_for_job(env.job_id)}" if env.num_nodes > 1 else "auto"
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)  # Slurm's own requeues of this submission
        if self.requeues:
            args.resume = True
            logger.warning(f"requeue {self.requeues}/{self.max_requeues}: resuming from the last checkpoint")
        elif restarts:
            args.resume = True
            logger.warning(f"restarted by Slurm ({restarts} time(s): scontrol requeue, node failure or "
                           "preemption): resuming from the last checkpoint")
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
        raise UsageError("--slurm: this machine has no Slurm (no sbatch found); pass --cluster local to run "
                         "the job as a local submitit process, or drop --slurm to run it directly")
    workers = workers_per_node(args)
    gpus = args.gpus_per_node if executor.cluster == "slurm" or _has_cuda() else 0
    cpus = args.cpus_per_task or (args.cpus_per_gpu * gpus if gpus else workers)
    if executor.cluster == "slurm":
        args = copy.deepcopy(args)
        args.num_gpus = workers  # what `entry` spawns on each node
        limits = partition_limits(args.partition)
        if limits is None:
            logger.warning(f"could not read partition {args.partition or '(default)'} with sinfo; submitting "
                           "without checking that it can run the job")
        else:
            check_request(limits, args.nodes, cpus, gpus)
    params: dict[str, Any] = dict(name=job_name, nodes=args.nodes, tasks_per_node=1, timeout_min=args.timeout,
                                  gpus_per_node=gpus, cpus_per_task=cpus)
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
    job = submit_to(executor, SubmititJob(entry, args, max_requeues=args.max_requeues))
    logger.info(f"submitted job {job.job_id}; logs in {str(folder).replace('%j', str(job.job_id))}")
    return job


def submit_to(executor, job: Callable[[], Any]):
    """`executor.submit(job)`, with a failed sbatch (no controller reachable, a request Slurm refuses) as one
    UsageError quoting sbatch's last line: submitit printed sbatch's stderr and raised its FailedJobError with a
    traceback."""
    import contextlib
    import io
    import sys

    from submitit.core.utils import FailedJobError

    captured = io.StringIO()  # submitit prints sbatch's stderr itself when sbatch fails
    try:
        with contextlib.redirect_stderr(captured):
            submitted = executor.submit(job)
    except FailedJobError as err:
        lines = [ln.strip() for ln in (str(err) or captured.getvalue()).splitlines() if ln.strip()]
        raise UsageError(f"--slurm: the job was not submitted; sbatch said: {lines[-1] if lines else '(nothing)'}") \
            from None
    except OSError as err:  # sbatch itself missing or not executable
        raise UsageError(f"--slurm: cannot run sbatch ({err}); the job was not submitted") from None
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    sys.stderr.write(captured.getvalue())
    return submitted


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
