"""Which code ran a stage: the git commit of the checkout and whether tracked files had changes, recorded beside
each main-job stage (tools/compare_jobs.py tells runs of two commits apart from reruns of one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["code_version", "describe_versions"]


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version(repo: Path) -> dict:
    """{"commit": sha or None, "dirty": tracked files differ from it (None if unknown)}; commit None where `repo`
    is no git checkout or git is absent (an installed copy): recorded as unknown, never guessed."""
    commit = _git(repo, "rev-parse", "--verify", "HEAD")
    if not commit:
        return {"commit": None, "dirty": None}
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def describe_versions(versions: list[dict] | None) -> str:
    """'abc1234', 'abc1234 with uncommitted changes', 'abc1234 then def5678' (a resume at another commit),
    'not recorded'."""
    if not versions:
        return "not recorded"
    parts = []
    for v in versions:
        if not isinstance(v, dict) or not v.get("commit"):
            parts.append("unknown (not a git checkout)")
        else:
            parts.append(str(v["commit"])[:10] + (" with uncommitted changes" if v.get("dirty") else ""))
    return " then ".join(parts)
