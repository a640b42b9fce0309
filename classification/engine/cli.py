"""Command-line conventions shared by tools/train_cls.py and tools/train_det.py: the process options, errors caused
by the input as one line that names the problem (the traceback goes to the log, or to the terminal with --debug),
and a warning when more worker processes are asked for than the machine has cores."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import urllib.error

import torch

from backbones import CheckpointReadError, IncompatibleWeightsError

from ..data.images import ImageReadError
from .errors import UsageError
from .run_directory import RunDirectoryBusy

__all__ = ["USER_ERRORS", "user_errors", "check_process_count", "add_launch_arguments", "hide_third_party_warnings"]

logger = logging.getLogger(__name__)

# What bad input raises: missing/unreadable files, unknown keys or names, bad values, unusable weights or images,
# divergence. A RuntimeError of any other kind is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    OSError, KeyError, ValueError, FloatingPointError, urllib.error.URLError, CheckpointReadError,
    IncompatibleWeightsError, ImageReadError, RunDirectoryBusy,
)


def _message(err: BaseException) -> str:
    if isinstance(err, KeyError) and err.args:
        text = str(err.args[0]).strip()  # KeyError's str() adds quotes around the message
    else:
        text = str(err).strip() or type(err).__name__
    return _worker_error_line(text, type(err).__name__) or text


def _worker_error_line(text: str, name: str) -> str | None:
    """The original message of an error raised in a DataLoader worker process, which the loader re-raises in the
    main process as the same type with the worker's whole traceback for message ("Caught ImageReadError in
    DataLoader worker process 0. Original Traceback ... ImageReadError: <message>"); None for other errors."""
    if not (text.startswith(f"Caught {name} in DataLoader worker process") and "Original Traceback" in text):
        return None
    last = [ln for ln in text.splitlines() if ln.strip()][-1].strip()
    head, sep, message = last.partition(": ")
    if sep and head.split(".")[-1] == name:  # "package.module.ImageReadError: message"
        last = message
    return f"{last} (in a data-loader worker)"


@contextlib.contextmanager
def user_errors(debug: bool = False, extra: tuple[type[BaseException], ...] = ()):
    """Turn USER_ERRORS (and `extra`) raised inside into `error: ...` on stderr and exit status 2."""
    try:
        yield
    except UsageError as err:  # its message is complete: no type name
        if debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except (*USER_ERRORS, *extra) as err:
        if debug:
            raise
        logger.debug("traceback of the error below", exc_info=True)  # into log.txt where logging is set up
        print(f"error: {type(err).__name__}: {_message(err)}\n(--debug shows the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
    except torch.multiprocessing.ProcessRaisedException as err:  # a spawned worker failed: its last line says why
        if debug:
            raise
        last = [ln for ln in str(err).strip().splitlines() if ln.strip()][-1:]
        print(f"error in a worker process: {last[0] if last else err}\n(--debug shows the traceback)",
              file=sys.stderr)
        raise SystemExit(2) from None


def hide_third_party_warnings() -> None:
    """Hide the two third-party warnings every run printed, about code that is not ours: `torch.jit.script` is
    deprecated (a FutureWarning from fvcore's focal_loss module, imported by Detectron2) and torch.meshgrid's
    indexing UserWarning (Detectron2's anchor generator; its "ij" default is the behaviour it relies on). Called by
    each tool (tools/quiet_warnings.py), a spawned training process (launch._worker) and a Slurm job (SubmititJob)
    before anything imports fvcore; nothing else is filtered."""
    import warnings

    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    warnings.filterwarnings("ignore", message=r"torch\.meshgrid: in an upcoming release, it will be required to "
                                              r"pass the indexing argument", category=UserWarning)


def check_process_count(processes: int) -> None:
    """UsageError, before any process starts, for more processes per machine than it can give one each: GPUs where
    there are GPUs (a worker without one fails inside the launch), cores where there are none (9 processes on 2
    cores each held a copy of the model and data, 4.9 GB, and crawled)."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise UsageError(f"--num-gpus must be an integer >= 1, got {processes!r}")
    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        if processes > gpus:
            raise UsageError(f"--num-gpus {processes}: this machine shows {gpus} GPU(s) (CUDA_VISIBLE_DEVICES "
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); one process per GPU")
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if processes > cores:
        raise UsageError(f"--num-gpus {processes}: no GPU here, so each is a CPU process, and this machine gives "
                         f"this job {cores} core(s); use --num-gpus {cores} or fewer")


def add_launch_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--num-gpus / --num-machines / --machine-rank / --dist-url (Detectron2's names) and --debug."""
    g = parser.add_argument_group("processes (torch.distributed: NCCL on GPUs, gloo on CPUs)")
    g.add_argument("--num-gpus", type=int, default=1,
                   help="processes per machine: one per GPU; on a machine without GPUs, CPU processes (gloo)")
    g.add_argument("--num-machines", type=int, default=1)
    g.add_argument("--machine-rank", type=int, default=0)
    g.add_argument("--dist-url", default="auto", help="tcp://HOST:PORT of machine 0 ('auto': a free local port)")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return parser
