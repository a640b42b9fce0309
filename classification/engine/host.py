"""The machine a figure was measured on, in words: the CPU model and how many CPUs this process may use -- what the
README and RESULTS.md state beside every time (the same job runs ~1.5x apart on this project's two kinds of VM)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["machine_text"]


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere platform's processor string, else the architecture)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_text() -> str:
    """E.g. "Intel(R) Xeon(R) Processor, 2 CPUs"."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{_cpu_model()}, {cpus} CPU{'' if cpus == 1 else 's'}"
