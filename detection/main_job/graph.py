"""Running a graph of training stages: each stage a tool's command line with its own directory, the command recorded
beside it, finished stages reused, interrupted ones resumed (`--resume`). Here (run_graph): subprocesses, at most
`jobs` at a time with `threads` threads each, each after its dependencies, time estimates from each stage's
progress.json. On Slurm (submit_graph): one job per stage with afterok dependencies, the report last."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import stat
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from backbones.checkpoint_io import atomic_write_text
from classification.engine.progress import read_progress
from classification.engine.run_directory import prune_intermediate_checkpoints
from classification.engine.run_files import (
    FINAL_CHECKPOINT,
    LAST_CHECKPOINT,
    STAGE_LOG,
    STAGE_RECORD,
    RunFileError,
    earlier_augmentation_text,
    read_classification_run,
    read_json,
)

from ..engine.code_version import code_version
from ..project import project_files
from .data_identity import file_sha256
from .plan import Stage

__all__ = ["relocate_stages", "StageConflict", "Estimator", "run_graph", "submit_graph", "StageCommand",
           "prune_checkpoints",
           "check_stage", "StageRecord", "read_stage_record", "stage_done", "STOP_REQUESTED"]

# Set by the main job's SIGINT / SIGTERM handler before it raises KeyboardInterrupt. Python swallows an exception
# raised while it runs a fork hook ("Exception ignored in ... _releaseLock"): a signal that lands while Popen starts
# the next stage would be lost, so run_graph also polls this.
STOP_REQUESTED = threading.Event()


def stage_done(stage: Stage) -> bool:
    """Finished = the tool's final checkpoint and its evaluation exist (run_files says what that is per tool)."""
    if stage.kind in ("pretrain", "degradation"):  # tools/train_cls.py runs
        return read_classification_run(stage.out).finished
    from ..report.runs import load_run  # the one definition of a finished detection run

    run = load_run(stage.out)
    return run.status == "finished" and run.iterations == stage.iterations


@dataclass(frozen=True)
class StageRecord:
    """main_job_stage.json: the command a stage ran, its thread count, and every code version that ran it."""

    argv: list[str] | None
    threads: int | None
    code: list[dict] = field(default_factory=list)  # oldest first; [] where the record predates them
    inputs: dict | None = None  # input_identity when the stage started; None where the record predates it (and
    #   a dependency recorded as None had no checkpoint then: unknown, not checked)


@functools.lru_cache(maxsize=256)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a checkpoint; cached per (path, size, mtime): the job checks every stage at start."""
    return file_sha256(Path(path))


def input_identity(deps: list[Path]) -> dict[str, str | None]:
    """What a stage starts from, by content, not by path: the sha256 of each dependency's final checkpoint, or of
    a weights file given to the job (None while it has none). A pretraining stage deleted and retrained with other
    settings left the detection stages trained from its old weights to be reused as if built on the new ones.
    Content, not file times: a job directory copied without its times (cp -r) is the same job."""
    out: dict[str, str | None] = {}
    for dep in deps:
        path = dep if dep.is_file() else dep / FINAL_CHECKPOINT  # a weights file given, or a stage's checkpoint
        try:
            st = path.stat()
            out[str(dep)] = _digest(str(path), st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
        except OSError:  # absent, unreadable: no identity
            out[str(dep)] = None
    return out


def record_inputs(out: Path, deps: list[Path]) -> None:
    """Write the stage's inputs into its record as it starts (a Slurm job starts long after its record was
    written at submission, when its dependencies had not run)."""
    try:
        rec = read_json(out / STAGE_RECORD)
    except RunFileError:
        rec = None
    if isinstance(rec, dict):
        atomic_write_text(out / STAGE_RECORD, json.dumps({**rec, "inputs": input_identity(deps)}, indent=1))


def relocate_stages(stages: list, moves: list[tuple[tuple[str, ...], tuple[str, ...]]]) -> int:
    """Rewrite the command lines recorded by this plan's stages to name the data where it lies now (moves:
    (recorded arguments, given arguments) of data whose content is unchanged: data_identity.moved_paths); the
    number of records rewritten. Only a run of consecutive arguments equal to a recorded one is replaced."""
    n = 0
    for stage in stages:
        try:
            rec = read_json(stage.out / STAGE_RECORD)
        except RunFileError:
            continue
        if not (isinstance(rec, dict) and isinstance(rec.get("argv"), list)):
            continue
        argv = list(rec["argv"])
        for old, new in moves:
            k = len(old)
            argv = next((argv[:i] + list(new) + argv[i + k:] for i in range(len(argv) - k + 1)
                         if tuple(argv[i:i + k]) == old), argv)
        if argv != rec["argv"]:
            atomic_write_text(stage.out / STAGE_RECORD, json.dumps({**rec, "argv": argv}, indent=1))
            n += 1
    return n


def read_stage_record(out: Path) -> StageRecord | None:
    """The stage directory's record; None without a readable one."""
    try:
        rec = read_json(Path(out) / STAGE_RECORD)
    except RunFileError:
        return None
    if not isinstance(rec, dict):
        return None
    argv, threads, code, inputs = rec.get("argv"), rec.get("threads"), rec.get("code"), rec.get("inputs")
    return StageRecord([str(a) for a in argv] if isinstance(argv, list) else None,
                       threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
                       [v for v in code if isinstance(v, dict)] if isinstance(code, list) else [],
                       inputs if isinstance(inputs, dict) else None)


class StageConflict(RuntimeError):
    """A stage directory holds a run made with other settings."""


def _write_record(stage: Stage, threads: int, code: dict) -> None:
    """The record, plus every code version that ran the stage (a resume at another commit appends one); the code
    version is provenance, not a setting: resuming at a new commit is allowed, and compare_jobs reports it."""
    before = read_stage_record(stage.out)
    versions = list(before.code) if before is not None and before.argv == stage.argv else []
    if not versions or versions[-1] != code:
        versions.append(code)
    atomic_write_text(stage.out / STAGE_RECORD, json.dumps(
        {"argv": stage.argv, "threads": threads, "code": versions, "inputs": input_identity(stage.inputs)},
        indent=1))


def check_stage(stage: Stage, threads: int) -> bool:
    """True if the stage is finished with these settings and its inputs unchanged; raises StageConflict, naming what
    to do with that one directory, if it holds another stage's, was trained from weights that changed since, or is
    unfinished at another thread count. A finished stage is reused whatever thread count it ran with (its record
    keeps it; --threads is how a job runs, not what it computes): a rerun with other --threads was locked out and
    told to --fresh, which deletes every stage."""
    if not stage.out.exists():
        return False
    before = read_stage_record(stage.out)
    if before is None:
        raise StageConflict(f"{stage.out} holds no readable {STAGE_RECORD} (not made by the main job, or its record "
                            "was damaged): delete that directory, or choose another --output-dir")
    if before.argv != stage.argv:
        raise StageConflict(f"{stage.out} was made by other settings: delete that directory to rerun this stage with "
                            "these (--fresh deletes every stage of the job), or choose another --output-dir")
    if stage.kind in ("pretrain", "degradation") and read_classification_run(stage.out).earlier_augmentation:
        raise StageConflict(f"{earlier_augmentation_text(stage.out)}: its numbers are not what this code gives. "
                            "Delete that directory to retrain it (--fresh deletes every stage of the job)")
    now = input_identity(stage.inputs)
    changed = [d for d, was in (before.inputs or {}).items() if was is not None and now.get(d) != was]
    if changed:
        state = "is gone" if now.get(changed[0]) is None else "changed since (retrained?)"
        source = Path(changed[0]) if Path(changed[0]) in stage.files else Path(changed[0]) / FINAL_CHECKPOINT
        raise StageConflict(f"{stage.out} was trained from {source}, which {state}: "
                            f"delete {stage.out} to train it from the new weights, or rerun with --fresh")
    done = stage_done(stage)
    if not done and before.threads is not None and before.threads != threads:  # one run, one thread count
        raise StageConflict(f"{stage.out} is unfinished and ran with {before.threads} thread(s): rerun with --threads "
                            f"{before.threads} to resume it, or delete that directory to restart it with {threads}")
    return done


def prune_checkpoints(out: Path) -> int:
    """After a stage finished: delete its intermediate checkpoints (only model_final.pth is read later); bytes."""
    last = out / LAST_CHECKPOINT
    if last.is_file():  # both trainers already name model_final.pth at the end; never leave it naming a deleted file
        atomic_write_text(last, FINAL_CHECKPOINT)
    return prune_intermediate_checkpoints(out, keep=0)


# A detection leg's inference on one test image, as a fraction of its training step (2 images, forward and
# backward): 0.32-0.44 over VGG-16(BN), VGG-11(BN), plain-18, ResNet-18 and -34 at width 0.25 (1 thread, AMD EPYC,
# 2026-12-06: 1000 embedded val scenes in 14-25 s a leg against 33-76 ms a step).
INFERENCE_PER_STEP = 0.4


class Estimator:
    """Remaining minutes: each stage's iterations x seconds per iteration of its kind (measured by the running and
    finished stages of that kind, else the calibration), plus per-stage start-up and evaluation as measured by the
    finished stages of its kind (else the calibration's 15 s, and for a detection leg its `eval_images` test images
    at INFERENCE_PER_STEP of a step each), divided by the parallel stages."""

    def __init__(self, calibration: dict, jobs: int, eval_images: int = 0):
        self.calibration, self.jobs, self.eval_images = calibration, jobs, eval_images
        self.measured: dict[tuple, list[float]] = {}
        self.overhead: dict[str, list[float]] = {}  # per stage kind: a detection leg's includes its evaluation

    def observe(self, stage: Stage, wall: float | None = None) -> None:
        prog = read_progress(stage.out)
        if prog and prog["iteration"] > prog["start_iteration"]:
            rate = prog["seconds"] / (prog["iteration"] - prog["start_iteration"])
            self.measured[stage.rate_key] = [rate]
            if wall is not None and prog["start_iteration"] == 1:
                self.overhead.setdefault(stage.kind, []).append(max(0.0, wall - rate * stage.iterations))

    def rate(self, stage: Stage) -> float:
        m = self.measured.get(stage.rate_key)
        return m[-1] if m else self.calibration.get(stage.rate_key, 0.1)

    def stage_seconds(self, stage: Stage, done_fraction: float = 0.0) -> float:
        seen = self.overhead.get(stage.kind)
        over = statistics.median(seen) if seen else 15.0 + (
            INFERENCE_PER_STEP * self.rate(stage) * self.eval_images if stage.kind == "detect" else 0.0)
        return (1 - done_fraction) * (self.rate(stage) * stage.iterations + over)

    def remaining_minutes(self, pending: list[Stage], running: list[Stage]) -> float:
        total = sum(self.stage_seconds(s) for s in pending)
        for s in running:
            prog = read_progress(s.out)
            frac = prog["iteration"] / max(1, prog["iterations"]) if prog else 0.0
            total += self.stage_seconds(s, frac)
        return total / max(1, min(self.jobs, len(pending) + len(running))) / 60


# ---- running the graph ------------------------------------------------------------------------------------------

def _stage_env(threads: int) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + ln for ln in lines[-n:])


def run_graph(stages: list[Stage], jobs: int, threads: int, estimator: Estimator, log=print, gpus: int = 0) -> None:
    """Run every unfinished stage, at most `jobs` at a time, each after its dependencies (and on its own `gpus`
    GPUs); raises RuntimeError naming the first stage that failed (after the running ones end) and StageConflict
    before anything runs."""
    slots = GpuSlots(gpus)
    finished = {s.out for s in stages if check_stage(s, threads)}
    root = project_files().root
    code = code_version(root)
    for s in stages:
        if s.out in finished:
            log(f"[main job] reused: {s.title} ({s.out})")
    pending = [s for s in stages if s.out not in finished]
    running: dict[Path, tuple[Stage, subprocess.Popen, float, object, bool]] = {}
    failed: list[str] = []
    last_report = 0.0
    try:
        while running or (pending and not failed):  # after a failure: let the running stages end, start none
            for s in list(pending):
                if STOP_REQUESTED.is_set():
                    raise KeyboardInterrupt("stop requested")
                if failed or len(running) >= jobs:
                    break
                if any(d not in finished for d in s.deps):
                    continue
                pending.remove(s)
                running[s.out] = _start_stage(s, threads, code, root, slots)
                log(f"[main job] {'resumed' if running[s.out][4] else 'started'}: {s.title}  (log: "
                    f"{s.out / STAGE_LOG})")  # after it is in `running`: a Ctrl-C here still stops it
            time.sleep(0.5)
            if STOP_REQUESTED.is_set():
                raise KeyboardInterrupt("stop requested")
            for key, (s, proc, t0, logf, _) in list(running.items()):
                estimator.observe(s)
                rc = proc.poll()
                if rc is None:
                    continue
                logf.close()
                del running[key]
                wall = time.time() - t0
                if rc == 0 and stage_done(s):
                    estimator.observe(s, wall)
                    freed = prune_checkpoints(s.out)
                    finished.add(s.out)
                    log(f"[main job] finished in {wall / 60:.1f} min: {s.title}"
                        + (f" (removed {freed / 2**20:.0f} MiB of intermediate checkpoints)" if freed else ""))
                else:
                    why = f"exit {rc}" if rc else "it exited 0 without its final checkpoint and evaluation"
                    failed.append(f"{s.title} ({why}); log {s.out / STAGE_LOG}:\n{_tail(s.out / STAGE_LOG)}")
            if running and time.time() - last_report > 60:
                last_report = time.time()
                log(f"[main job] {len(finished)}/{len(stages)} stages finished, {len(running)} running; about "
                    f"{estimator.remaining_minutes(pending, [r[0] for r in running.values()]):.0f} min left")
    except KeyboardInterrupt:
        _stop_running(list(running.values()))
        raise
    if failed:
        raise RuntimeError("stage failed: " + "\n".join(failed))


class GpuSlots:
    """The GPUs of this machine split among the stages running at once: slot k is devices k*per_stage ...
    (k+1)*per_stage - 1, held by a stage's process until it exits (per_stage 0: CPU stages, nothing to split)."""

    def __init__(self, per_stage: int):
        self.per_stage, self.held = per_stage, {}

    def env(self, env: dict) -> tuple[dict, int | None]:
        """`env` with CUDA_VISIBLE_DEVICES set to a free slot's devices, and that slot (None without GPUs)."""
        if not self.per_stage:
            return env, None
        slot = min(k for k in range(len(self.held) + 1) if k not in self.held or self.held[k].poll() is not None)
        devices = range(slot * self.per_stage, (slot + 1) * self.per_stage)
        return {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}, slot

    def hold(self, slot: int | None, proc: subprocess.Popen) -> None:
        if slot is not None:
            self.held[slot] = proc


def _start_stage(s: Stage, threads: int, code: dict, root: Path, slots: GpuSlots) -> tuple:
    """Start a stage's tool (resuming it where it has a checkpoint) on a free slot of GPUs: (stage, process, start
    time, its log file, whether it resumed). Nothing runs between the start and the return that a Ctrl-C could
    interrupt."""
    s.out.mkdir(parents=True, exist_ok=True)
    _write_record(s, threads, code)
    resume = ["--resume"] if (s.out / LAST_CHECKPOINT).is_file() else []
    logf = open(s.out / STAGE_LOG, "a")
    env, slot = slots.env(_stage_env(threads))
    proc = subprocess.Popen([sys.executable, s.argv[0], *resume, *s.argv[1:]], cwd=root, env=env,
                            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_default_sigint)
    slots.hold(slot, proc)
    return s, proc, time.time(), logf, bool(resume)


def _stop_running(running: list[tuple]) -> None:
    """Stop the running stages (SIGINT: a pretraining stage checkpoints its last step), a minute for all of them
    together, then SIGKILL; a second Ctrl-C meanwhile must not orphan them."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for _, proc, _, _, _ in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        deadline = time.time() + 60
        for _, proc, _, logf, _ in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            logf.close()
    finally:
        signal.signal(signal.SIGINT, previous)


def _default_sigint() -> None:
    """In a stage, before exec: SIGINT raises KeyboardInterrupt (the stop run_graph sends), also when the job was
    started with SIGINT ignored (a background command of a shell without job control), which children inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class StageCommand:
    """What a stage's Slurm job runs (submitit pickles it): the stage's tool, always with --resume (a fresh
    directory starts from scratch, so a Slurm-side requeue re-running this continues instead of failing), output
    appended to the stage's stage.log. On USR2 (preemption, time limit) submitit calls checkpoint(): the job is
    requeued and the tool resumes from its last checkpoint; the tool itself ignores USR2 meanwhile."""

    def __init__(self, argv: list[str], log: Path, threads: int, resume: bool = True, cwd: Path | None = None,
                 deps: tuple[Path, ...] = ()):
        self.argv, self.log, self.threads, self.resume, self.deps = argv, log, threads, resume, tuple(deps)
        self.cwd = cwd or project_files().root  # resolved where the job is submitted, not on the node

    def __call__(self) -> int:
        from classification.engine.slurm import ignore_preemption_signal

        machine, log, first = self._this_node()
        if self.deps and first:  # they have run now (afterok): what this stage starts from
            record_inputs(self.log.parent, list(self.deps))
        with open(log, "a") as logf:
            rc = subprocess.call([sys.executable, self.argv[0], *(["--resume"] if self.resume else []),
                                  *machine, *self.argv[1:]], cwd=self.cwd,
                                 env=_stage_env(self.threads), stdout=logf, stderr=subprocess.STDOUT,
                                 preexec_fn=ignore_preemption_signal)
        if rc:  # a failed job: its dependants (afterok) never start
            raise RuntimeError(f"{' '.join(self.argv[:1])} exited {rc}; see {log}")
        return rc

    def _this_node(self) -> tuple[list[str], Path, bool]:
        """This node's place in a stage of several nodes: the tools' --num-machines / --machine-rank / --dist-url
        (node 0's host, a port from the job id: as train_det's own Slurm jobs), its log (node k > 0:
        stage.node<k>.log) and whether it is node 0; ([], stage.log, True) on one node."""
        import submitit

        from classification.engine.slurm import port_for_job

        if "SLURM_JOB_ID" not in os.environ or int(os.environ.get("SLURM_JOB_NUM_NODES") or 1) < 2:
            return [], self.log, True
        env = submitit.JobEnvironment()
        machine = ["--num-machines", str(env.num_nodes), "--machine-rank", str(env.node), "--dist-url",
                   f"tcp://{env.hostnames[0]}:{port_for_job(env.job_id)}"]
        log = self.log if env.node == 0 else self.log.with_name(f"{self.log.stem}.node{env.node}{self.log.suffix}")
        return machine, log, env.node == 0

    def checkpoint(self):
        import submitit

        return submitit.helpers.DelayedSubmission(StageCommand(self.argv, self.log, self.threads, self.resume,
                                                               self.cwd, self.deps))


def submit_graph(stages: list[Stage], threads: int, folder: Path, *, final: list[str] | None = None,
                 partition: str | None = None, timeout_min: int = 240, gpus: int = 0, nodes: int = 1,
                 log=print) -> dict[str, str]:
    """Submit every unfinished stage as its own Slurm job (submitit), after the jobs of its unfinished dependencies
    (`--dependency afterok`), and `final` (a tool's argv: the report) after all of them. Finished stages are
    reused as by run_graph; a StageConflict is raised before anything is submitted. Returns {what: job id}."""
    import submitit

    from classification.engine.errors import UsageError
    from classification.engine.slurm import check_request, partition_limits, submit_to

    finished = {s.out for s in stages if check_stage(s, threads)}
    code = code_version(project_files().root)
    limits = partition_limits(partition)
    if limits is not None:
        check_request(limits, nodes, threads, gpus)
    jobs: dict[Path, str] = {}

    def submit(name: str, command: StageCommand, deps: list[str], gpus: int = gpus, nodes: int = nodes) -> str:
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        params = {"name": name, "nodes": nodes, "tasks_per_node": 1, "cpus_per_task": threads, "gpus_per_node": gpus,
                  "timeout_min": timeout_min, "slurm_signal_delay_s": 120}
        if partition:
            params["slurm_partition"] = partition
        if deps:
            params["slurm_additional_parameters"] = {"dependency": "afterok:" + ":".join(deps)}
        ex.update_parameters(**params)
        try:
            return submit_to(ex, command).job_id
        except UsageError as err:  # sbatch failed: say which jobs are queued already
            queued = ", ".join(jobs.values())  # the report is submitted last
            raise UsageError(f"{err}" + (f"; submitted before it: {queued} (`scancel` them before submitting "
                                         "again)" if queued else "")) from None

    for s in stages:  # plan order: every stage after its dependencies
        if s.out in finished:
            log(f"[main job] reused: {s.title} ({s.out})")
            continue
        s.out.mkdir(parents=True, exist_ok=True)
        _write_record(s, threads, code)
        jobs[s.out] = submit(f"main_job-{s.kind}", StageCommand(s.argv, s.out / STAGE_LOG, threads, deps=s.inputs),
                             [jobs[d] for d in s.deps if d in jobs])
        log(f"[main job] submitted {jobs[s.out]}: {s.title}  (log: {s.out / STAGE_LOG})")
    ids = {str(k): v for k, v in jobs.items()}
    if final is not None:
        ids["report"] = submit("main_job-report", StageCommand(final, folder / "report.log", threads, resume=False),
                               list(jobs.values()), gpus=0, nodes=1)  # reads the runs: no GPU held for it
        log(f"[main job] submitted {ids['report']}: the report, after every stage  (log: {folder / 'report.log'})")
    return ids
