"""Multi-process launch shared by classification and detection: torch.distributed, NCCL on GPUs, gloo on CPUs.

    launch(main, num_processes_per_machine=2, args=(cfg,))   # 2 CPU processes (gloo) or 2 GPUs (NCCL)

World size 1 calls `main` in this process. Otherwise `num_processes_per_machine` workers are spawned (the
"spawn" start method, so workers import the package afresh: nothing CUDA- or fork-unsafe is inherited); each
joins the process group of `dist_url` ("auto": a free local port, single machine only). Works where
Detectron2's own launch() does not: without CUDA (it asserts CUDA and hard-codes NCCL).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["launch", "find_free_port", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = timedelta(minutes=30)
logger = logging.getLogger(__name__)


def find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _available_cpus() -> int:
    """CPUs this process may use: Slurm's allocation of the task (SLURM_CPUS_PER_TASK), else its CPU affinity."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _worker(local_rank: int, main_func: Callable, world_size: int, per_machine: int, machine_rank: int,
            dist_url: str, args: Sequence[Any], backend: str, timeout: timedelta,
            worker_init: Callable[[int, Any], None] | None) -> None:
    from .cli import hide_third_party_warnings
    from .slurm import ignore_preemption_signal

    ignore_preemption_signal()  # under Slurm, only the task that spawned us handles it (checkpoint and requeue)
    hide_third_party_warnings()  # a spawned process starts with Python's default filters
    rank = machine_rank * per_machine + local_rank
    dist.init_process_group(backend, init_method=dist_url, world_size=world_size, rank=rank, timeout=timeout)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    else:  # share the CPUs of this allocation (a Slurm task's, else the machine's) instead of each using all
        torch.set_num_threads(max(1, _available_cpus() // per_machine))
    num_machines = world_size // per_machine
    local_group = None
    for m in range(num_machines):  # every process must create every group, in the same order
        group = dist.new_group(list(range(m * per_machine, (m + 1) * per_machine)))
        if m == machine_rank:
            local_group = group
    if worker_init is not None:
        worker_init(local_rank, local_group)
    dist.barrier()
    try:
        main_func(*args)
    finally:
        dist.destroy_process_group()


def launch(main_func: Callable, num_processes_per_machine: int, num_machines: int = 1, machine_rank: int = 0,
           dist_url: str | None = "auto", args: Sequence[Any] = (), *, backend: str | None = None,
           timeout: timedelta = DEFAULT_TIMEOUT, worker_init: Callable[[int, Any], None] | None = None) -> Any:
    """Run `main_func(*args)` in `num_processes_per_machine` processes on each of `num_machines` machines.

    backend: "nccl" when CUDA is available, else "gloo" (default). worker_init(local_rank, local_group) runs in
    each worker after the process groups exist (e.g. to hand the local group to a library).
    """
    if num_processes_per_machine < 1 or num_machines < 1:
        raise ValueError(f"need at least one process and machine, got {num_processes_per_machine} x {num_machines}")
    world_size = num_processes_per_machine * num_machines
    if world_size == 1:
        return main_func(*args)
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl" and torch.cuda.device_count() < num_processes_per_machine:
        raise RuntimeError(f"{num_processes_per_machine} processes per machine requested but only "
                           f"{torch.cuda.device_count()} GPUs are visible")
    if dist_url in (None, "auto"):
        if num_machines > 1:
            raise ValueError("dist_url='auto' only works on one machine; pass tcp://<first node>:<port>")
        dist_url = f"tcp://127.0.0.1:{find_free_port()}"
    logger.info(f"launching {world_size} processes ({backend}, {dist_url})")
    mp.start_processes(_worker, nprocs=num_processes_per_machine, start_method="spawn",
                       args=(main_func, world_size, num_processes_per_machine, machine_rank, dist_url, tuple(args),
                             backend, timeout, worker_init))
    return None
