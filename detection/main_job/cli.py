"""The main job's command line (tools/main_job.py): plan, estimate, run the stages here or on Slurm, report.

Stages form a graph (a detector waits for its backbone's pretraining) and run as subprocesses, `jobs` at a time
with `threads` threads each (graph.py). Each stage writes into its own directory under OUTPUT with the command it
ran; a second run reuses finished stages, resumes interrupted ones, and refuses (rather than overwrites) a stage
made with other settings. Then the chance level, the report and a summary whose every figure is read from the
runs (results.py). What the job runs: plan.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from backbones.checkpoint_io import atomic_write_text
from classification.analysis.degradation import RECIPE
from classification.engine.errors import UsageError
from classification.engine.host import machine_text
from classification.engine.run_directory import RunDirectoryBusy, lock_run_directory
from classification.engine.run_files import JOB_DATA, JOB_RESULTS, JOB_SUMMARY, STAGE_LOG, STAGE_RECORD

from ..datasets.embedded import EmbeddedSpec
from ..evaluation.chance import chance_ap
from ..project import project_files
from ..report import ReportSection
from ..report.writer import report_files
from .checks import check_arms, check_pretrained_weights_fit
from .control import control_lines
from .data import (
    VOC,
    DataError,
    check_data,
    data_paths,
)
from .data_identity import (
    check_data_identity,
    data_identity,
    moved_paths,
    record_data_identity,
    test_set_identity,
)
from .data_scale import input_overrides
from .dry_run import print_dry_run, print_paper_dry_run
from .family import family_sections
from .given_top1 import given_weights_top1
from .graph import (
    STOP_REQUESTED,
    Estimator,
    StageConflict,
    check_stage,
    read_stage_record,
    relocate_stages,
    run_graph,
    stage_done,
    submit_graph,
)
from .headline import headline_lines
from .leg import build_detection_leg, build_pretrain_step, seconds_per_step
from .leg_configs import leg_config_files
from .notes import generated_notes
from .options import build_parser, plan_from_args
from .plan import MainJobPlan, PlanError, Stage, plan_stages
from .results import (
    COMPARED_METRICS,
    data_text,
    degradation_comparison_lines,
    degradation_table,
    job_results,
    layer_mean,
    scale_text,
    summary_lines,
)

__all__ = ["main", "build_parser", "plan_from_args", "measure_step_seconds"]


# ---- time estimates: measured step times, replaced by each stage's own iterations as they run -------------------

def measure_step_seconds(plan: MainJobPlan, threads: int, keys: set[tuple[str, str, str]]) -> dict:
    """Seconds per training iteration of each (kind, model, variant) in `keys` (Stage.rate_key: a pretraining
    run's norm, a detection leg's arm), timed here over 3 steps after 2 warm-up steps with `threads` threads (the
    calibration behind --dry-run and the first estimate)."""
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for kind, model, variant in sorted(keys):
        if kind == "pretrain":
            leg = build_pretrain_step(model, options=plan.pretrain_options(model, variant),
                                      image_size=plan.pretrain_image_size, batch=plan.pretrain_batch)
        elif kind == "degradation":  # full-width CIFAR nets, batch 128 (plan.degradation_args)
            leg = build_pretrain_step(model, options=plan.degradation_options(), image_size=RECIPE.image_size,
                                      batch=RECIPE.batch)
        elif plan.scale == "data":  # one process's step of the leg's configs at its size, on the embedded scenes
            configs = leg_config_files(model, arm=variant, scale="data", data_format=plan.detect_data.format)
            leg = build_detection_leg(model, arm=variant, width=plan.width, configs=configs, overrides=[
                *input_overrides(plan.data_scale(model, variant)), "SOLVER.IMS_PER_BATCH", "2",
                "DATALOADER.NUM_WORKERS", "0", "DATASETS.TRAIN", '("embedded_train",)',
                "MODEL.ROI_HEADS.NUM_CLASSES", "4", "MODEL.WEIGHTS", ""])
        else:
            leg = build_detection_leg(model, arm=variant, width=plan.width,
                                      overrides=["DATALOADER.NUM_WORKERS", "0"])
        rates[(kind, model, variant)] = seconds_per_step(leg.step)
    return rates



def _fresh(out: Path, stages: list[Stage], log, only: list[Stage] | None = None) -> None:
    """Delete only what a main job made in `out`: each stage directory (this plan's, or an earlier plan's in the
    same kind folders; `only`: just these stages', --rerun-changed's) whose stage record names that very directory
    as the stage's output, and the report and the summary. Never through a symbolic link: a symlinked pretrain/ led
    --fresh into another job's stages (and a user's file beside them); refused before anything is deleted."""
    option = "--fresh" if only is None else "--rerun-changed"
    folders = {s.out.parent for s in stages} if only is None else set()
    dirs = {*(s.out for s in (stages if only is None else only)),
            *(d for k in folders if k.is_dir() for d in k.iterdir())}
    links = [p for p in (out / "report", *folders, *dirs) if p.is_symlink()]
    if links:
        raise PlanError(f"{option}: {sorted(links)[0]} is a symbolic link; refusing to delete through it (remove "
                        "the link, or give another --output-dir)")
    removed = 0
    for d in sorted(dirs):
        record = read_stage_record(d) if (d / STAGE_RECORD).is_file() else None
        if record is not None and record.argv is not None and str(d) in record.argv:  # its own output directory
            shutil.rmtree(d)
            removed += 1
    kept = _remove_report(out / "report")
    for p in (out / JOB_SUMMARY, out / JOB_RESULTS, out / JOB_DATA):  # JOB_DATA: what they ran on
        if p.is_file():
            p.unlink()
    log(f"[main job] {option}: removed {removed} stage directories, the "
        f"report and the summary under {out}"
        + (f" (kept what the job did not make in {out / 'report'}: {', '.join(kept)})" if kept else ""))


def _remove_report(report: Path) -> list[str]:
    """Delete the files the job's report made (writer.report_files), and the folder when that empties it; the names
    of what is left (a user's file beside them)."""
    if not report.is_dir():
        return []
    for f in report_files(report):
        if f.is_file() and not f.is_symlink():
            f.unlink()
    left = sorted(p.name for p in report.iterdir())
    if not left:
        report.rmdir()
    return left


def main(argv: list[str] | None = None) -> int:
    """The job; Ctrl-C anywhere in it (time estimate, dataset, stages, report) ends it with one line, exit 130; a
    plan that cannot run, or no checkout to run it from, with one line and exit 2."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("\n[main job] interrupted; finished stages are kept, a rerun resumes the others", file=sys.stderr)
        return 130
    except (PlanError, DataError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _stop_on_signals() -> None:
    """`kill PID` (SIGTERM) stops the job as Ctrl-C does: its stages are told to stop, not left running alone."""
    STOP_REQUESTED.clear()
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Ctrl-C too (an ignored SIGINT stays ignored)
        signal.signal(signal.SIGINT, _interrupt)


def _interrupt(signum, frame):
    STOP_REQUESTED.set()  # seen by run_graph even where Python swallows the exception (a fork hook)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = _checked_plan(args)
    given_top1 = given_weights_top1(plan)  # a given file's top-1 (measured: seconds), before anything trains
    if args.rerun_changed and (args.fresh or args.report_only or args.dry_run):  # never ignored
        other = "--fresh" if args.fresh else "--report-only" if args.report_only else "--dry-run"
        raise PlanError(f"--rerun-changed with {other}: it reruns the stages changed data feeds"
                        + (", and --fresh reruns them all; give one" if args.fresh else "; leave it out"))
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        raise PlanError("--jobs and --threads must be >= 1")
    if not 0 < args.gpu_tflops < float("inf"):  # inf printed "0 GPU-hours"
        raise PlanError(f"--gpu-tflops must be positive and finite, got {args.gpu_tflops}")
    project_files()  # no checkout to run the stages from: say so now, not when the first stage starts
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    out = Path(args.output_dir or f"output/main_job_{args.preset}")
    out = out.expanduser().resolve()  # "--output-dir=~/x" reaches us unexpanded by the shell
    t_start = time.time()
    stages = plan_stages(plan, out)
    record = _data_record(args, plan, out)
    if args.slurm and not args.dry_run:
        return _submit_to_slurm(args, argv, stages, threads, out, record)
    if args.report_only:  # the checks a rerun makes: the settings each stage ran with, the inputs it started from
        if record.moves:  # the same data elsewhere: the stages' records name it where it lies
            _apply_data_record(record, out, stages, fresh=False)
        try:
            missing = [s for s in stages if not check_stage(s, threads)]
        except StageConflict as err:
            print(f"[main job] error: --report-only: {err}", file=sys.stderr)
            return 1
        if missing:
            print("[main job] error: --report-only: unfinished stages: " + "; ".join(s.title for s in missing),
                  file=sys.stderr)
            return 1
        return _report(plan, stages, out, t_start, args, threads, given_top1, timed=False)
    if plan.scale == "paper" and args.dry_run:
        print_paper_dry_run(plan, stages, out, args.gpu_tflops)
        return 0
    estimator, data_line = _estimate(plan, stages, args, threads)
    if args.dry_run:
        print_dry_run(plan, stages, out, estimator, args, threads)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    try:
        lock_run_directory(out)  # held until the process ends, as a training run's
    except RunDirectoryBusy:
        print(f"[main job] error: another main job is running in {out}", file=sys.stderr)
        return 1
    _apply_data_record(record, out, stages, args.fresh)
    print(f"{data_line}; about {estimator.remaining_minutes(stages, []):.0f} min of stages (measured step times)"
          if data_line else f"[main job] {data_text(plan, None)}; no estimate before the stages report progress "
          "(paper scale: nothing is timed on this machine; --dry-run gives GPU-hours)", flush=True)
    _stop_on_signals()
    whole = not any(stage_done(s) for s in stages)  # every stage runs now: the job's minutes are measured here
    try:
        run_graph(stages, args.jobs, threads, estimator, lambda m: print(m, flush=True), gpus=plan.gpus)
    except RuntimeError as err:  # a failed stage, or a StageConflict
        print(f"[main job] error: {err}", file=sys.stderr)
        return 1
    return _report(plan, stages, out, t_start, args, threads, given_top1, timed=whole)


@dataclass
class DataRecord:
    """The data's identity and what it asks of the stages: those a change feeds (--rerun-changed) and the data
    moved elsewhere unchanged (its stages' records follow it); applied once the job holds its directory."""

    identity: dict
    changed: set[str]
    moves: list


def _data_record(args, plan: MainJobPlan, out: Path) -> DataRecord:
    """Stages made from other data than given now are refused before anything runs or reports (DataError)."""
    if args.dry_run:
        return DataRecord({}, set(), [])
    identity = data_identity(plan.pretrain_data, plan.detect_data)
    changed = set()
    if args.report_only or not args.fresh:
        changed = check_data_identity(out, identity, rerun_changed=args.rerun_changed and not args.report_only)
    return DataRecord(identity, changed, [] if args.fresh else moved_paths(out, identity))


def _apply_data_record(record: DataRecord, out: Path, stages: list[Stage], fresh: bool) -> None:
    """--fresh, or --rerun-changed's stale stages deleted; moved data's stage records rewritten; the record kept."""
    if fresh:
        _fresh(out, stages, print)
    elif record.changed:
        _fresh(out, stages, print, only=_stale(stages, record.changed))
    if record.moves:
        n = relocate_stages(stages, record.moves)
        print(f"[main job] the data moved ({'; '.join(f'{a[-1]} -> {b[-1]}' for a, b in record.moves)}), its "
              f"content unchanged: {n} stage record(s) now name where it lies", flush=True)
    record_data_identity(out, record.identity)


def _stale(stages: list[Stage], changed: set[str]) -> list[Stage]:
    """The stages a change of the data's parts feeds: every detection leg when the detection data changed; the
    pretraining on the folder and the legs that start from it when the folder changed."""
    pretraining = {s.out for s in stages if s.kind == "pretrain"} if "pretrain" in changed else set()
    return [s for s in stages if s.out in pretraining or s.kind == "detect" and (
        "detect" in changed or pretraining & set(s.deps))]


def _checked_plan(args) -> MainJobPlan:
    """The plan with its data read and checked (a dry run without the files present reads nothing), its GPUs
    there, its compared arms fair and every checkpoint loadable into its legs: each a one-line stop before
    anything is created."""
    plan = plan_from_args(args)
    paths = data_paths(plan.pretrain_data, plan.detect_data, bool(plan.pretrained_here()))
    present = not args.dry_run or all(Path(p).exists() for p in paths)
    plan = replace(plan, detect_data=check_data(plan.pretrain_data, plan.detect_data, present=present))
    if plan.nodes > 1 and not (args.slurm or args.dry_run or args.report_only):
        raise PlanError(f"--nodes-per-stage {plan.nodes}: a stage spans machines only as a Slurm job (--slurm)")
    if plan.gpus and not (args.slurm or args.dry_run or args.report_only):  # the stages train here
        import torch

        if torch.cuda.device_count() < plan.gpus * args.jobs:  # each running stage on GPUs of its own
            raise PlanError(f"--gpus-per-stage {plan.gpus} x --jobs {args.jobs}: this machine has "
                            f"{torch.cuda.device_count()} GPU(s); lower --jobs, submit with --slurm to a GPU "
                            "partition, or leave the option out for CPU stages")
    for text in check_arms(plan):  # an unfair pair stops here (PlanError) unless --allow-unfair-arms
        print(f"[main job] --allow-unfair-arms: {text}", flush=True)
    check_pretrained_weights_fit(plan)  # a checkpoint its detection legs cannot load stops here, not 25 min in
    return plan


def _estimate(plan: MainJobPlan, stages: list[Stage], args, threads: int) -> tuple[Estimator, str | None]:
    """The time estimate (a few steps of each kind of stage still to run, timed here on the embedded data) and
    the line that says what data the job runs on (None at paper scale: no estimate)."""
    keys = {s.rate_key for s in stages if not ((s.out / STAGE_RECORD).is_file() and stage_done(s))}
    if plan.scale == "paper":  # a CPU step of a full-width net at 600x1000 says nothing of a GPU's: the stages'
        return Estimator({}, args.jobs), None  # progress.json does
    print(f"[main job] {len(stages)} stages, {args.jobs} at a time with {threads} thread(s) each; measuring a few "
          "training steps of each kind for the time estimate ...", flush=True)
    import detection  # noqa: F401  (registers the embedded datasets)
    from detection.datasets import ensure_embedded_dataset

    manifest = ensure_embedded_dataset()  # the calibration's legs run on it, whatever the job's data
    line = (f"[main job] {manifest['source']} objects, classes {manifest['classes']}, "
            f"{manifest['counts']['train']['images']} train / {manifest['counts']['val']['images']} val images; "
            f"legs scored on {plan.embedded_test_set()}" if plan.detect_data.embedded else
            f"[main job] {data_text(plan, None)}")
    test_images = (plan.test_scenes if not plan.selection else EmbeddedSpec().num_holdout) \
        if plan.detect_data.embedded else 0  # the user's test set: in the 15 s
    return Estimator(measure_step_seconds(plan, threads, keys), args.jobs, test_images), line


def _submit_to_slurm(args, argv: list[str] | None, stages: list, threads: int, out: Path,
                     record: DataRecord) -> int:
    """Every unfinished stage as a Slurm job after its dependencies, then this command with --report-only."""
    import detection  # noqa: F401
    from detection.datasets import ensure_embedded_dataset

    ensure_embedded_dataset()  # generated once here, not by the first stage jobs at the same time
    out.mkdir(parents=True, exist_ok=True)
    given = list(sys.argv[1:] if argv is None else argv)
    report = [str(project_files().tool("main_job.py")),
              *[a for a in given if a not in ("--slurm", "--fresh", "--rerun-changed")],
              "--output-dir", str(out), "--report-only"]
    _apply_data_record(record, out, stages, args.fresh)
    try:
        ids = submit_graph(stages, threads, out / "slurm", final=report, partition=args.partition,
                           timeout_min=args.timeout, gpus=args.gpus_per_stage, nodes=args.nodes_per_stage,
                           log=lambda m: print(m, flush=True))
    except (RuntimeError, UsageError) as err:  # a StageConflict, or a request the partition cannot run
        print(f"[main job] error: {err}", file=sys.stderr)
        return 1
    print(f"[main job] {len(ids) - 1} stage job(s) and the report job {ids['report']} submitted; watch them with "
          f"`squeue -j {','.join(ids.values())}`; stage logs in each stage directory ({STAGE_LOG}), Slurm's in "
          f"{out / 'slurm'}; the report and summary.txt appear in {out} when the last job ends", flush=True)
    return 0


LAYER_RESPONSE_IMAGES = 500  # val items each degradation net's Fig. 7 responses are measured on


def _layer_responses(plan: MainJobPlan, stages: list[Stage], out: Path) -> dict[str, dict[str, list]]:
    """Fig. 7 for every finished degradation run: {model: {run: [(3x3 layer, std of its response)]}} on the first
    LAYER_RESPONSE_IMAGES val items, each net as its run built it (the checkpoint says which units)."""
    from backbones.convert import load_model
    from classification.analysis.layer_response import layer_response_std
    from classification.engine.run_files import FINAL_CHECKPOINT, read_classification_run
    from classification.engine.trainer import ClsConfig, build_datasets

    done = [s for s in stages if s.kind == "degradation" and read_classification_run(s.out).finished]
    if not done:
        return {}
    val = build_datasets(ClsConfig(dataset="embedded", image_size=RECIPE.image_size, train_samples=1,
                                   val_samples=plan.pretrain_val_images, workers=0, output_dir=str(out)))[1]
    responses: dict[str, dict[str, list]] = {}
    for s in done:
        net = load_model(s.out / FINAL_CHECKPOINT)[2]
        responses.setdefault(s.model, {})[s.out.name] = layer_response_std(net, val,
                                                                            max_images=LAYER_RESPONSE_IMAGES)
    return responses


def _degradation_section(results, plan: MainJobPlan, stages: list[Stage], report: Path,
                         responses: dict[str, dict[str, list]]) -> list[ReportSection]:
    """The degradation experiment's report section: Figs. 1/6 (training and val error against iterations, first
    seed of each net) and Fig. 7 (the std of each 3x3 layer's response on the val items, first seed; the
    comparisons over every seed are in the job's family), the summary's lines."""
    if not results.degradation:
        return []
    from classification.analysis.degradation import plot_curves
    from classification.analysis.layer_response import plot_layer_responses

    report.mkdir(parents=True, exist_ok=True)
    first = {d.model: next(iter(d.histories.items())) for d in results.degradation if d.histories}
    plot_curves({f"{m} ({run})": h for m, (run, h) in first.items()}, report / "degradation.png", eval_split="val",
                title=f"embedded composites, {plan.degradation_iterations} iterations of {RECIPE.batch}, "
                      f"lr {RECIPE.lr:g}"
                      + (", linear warm-up" if plan.degradation_warmup_fraction else "")
                      + (", pre-activation units" if plan.degradation_preact else ""))
    plot_layer_responses({m: responses[m][run] for m, (run, _) in first.items() if run in responses.get(m, {})},
                         str(report / "layer_responses.png"))
    seeds = len(plan.degradation_seeds)
    return [ReportSection(  # what it shows is in the report's notes (degradation_notes)
        "Degradation (paper Figs. 1, 6, 7)", table=degradation_table(results),
        lines=(f"One recipe for every net: {plan.degradation_recipe()}. "
               f"Final errors after {plan.degradation_iterations} iterations, mean ± sd over {seeds} seed(s): "
               "training error is the running error of the last 50 batches, augmentation on (the paper's curves); "
               "val error on the val split.", *degradation_comparison_lines(results)),
        figures=(("degradation.png", "training (dashed) and val (solid) error against iterations, first seed"),
                 ("layer_responses.png", "std of each 3x3 layer's response (after BN, before the addition and ReLU; "
                                         "in pre-activation units the 3x3 convs a BN of their unit follows) "
                                         f"on {LAYER_RESPONSE_IMAGES} val items, first seed")))]


def _test_set(plan: MainJobPlan) -> tuple[str, dict | None]:
    """(the registered name of the set the legs are scored on, the embedded set's manifest or None)."""
    import detection  # noqa: F401  (registers the embedded datasets)
    from detection.datasets import ensure_embedded_dataset

    if not plan.detect_data.embedded:
        plan.detect_data.register()
        return plan.detect_data.names[1], None
    return plan.embedded_test_set(), ensure_embedded_dataset()


def _control_details(results) -> list[ReportSection]:
    """The positive control's whole comparison and its pretraining gap, after the notes (the Result says its call)."""
    lines = control_lines(results)  # a job without one: the Result's sentence says so, nothing to detail
    return [ReportSection("Positive control", lines=tuple(lines))] if results.control_fraction is not None else []


def _scale_line(plan: MainJobPlan) -> list[str]:
    """The report's first result line at the data scale: the legs' size and schedule against the paper's."""
    text = scale_text(plan)
    return [f"{text[0].upper()}{text[1:]}."] if plan.scale == "data" else []


def _report(plan, stages: list, out: Path, t_start: float, args, threads: int, given_top1: dict, *,
            timed: bool) -> int:
    """The chance level, the report, the summary and results.json; timed: every stage ran in this process, so its
    minutes since t_start are the job's (results.json's wall_minutes; not after --report-only or reused stages)."""
    print(f"[main job] chance level and report ({(time.time() - t_start) / 60:.1f} min so far)", flush=True)
    from backbones.strict_json import strict_json
    from detection.report import write_report

    dataset, manifest = _test_set(plan)
    runs = [s for s in stages if s.kind == "detect"]
    chance = chance_ap(dataset) if runs and plan.detect_data.format != VOC else None  # COCO AP of random boxes
    responses = _layer_responses(plan, stages, out / "report")
    results = job_results(stages, plan, {m: {run: layer_mean(r) for run, r in runs.items()}
                                         for m, runs in responses.items()}, given_top1)
    results.data = data_text(plan, manifest)
    results.test_set = test_set_identity(dataset) if runs else {}
    notes = [f"Override (--allow-unfair-arms): {t}." for t in check_arms(plan)] + generated_notes(results, plan)
    leaderboard, scatter = family_sections(results, out / "report")  # details; a figure
    where = ("the embedded default" + (" (model selection)" if plan.selection else "")
             if plan.detect_data.embedded else plan.detect_data.describe())
    paths = write_report([s.out for s in runs], out / "report", groups=[s.group for s in runs],
                         given_checkpoints=frozenset(os.path.realpath(f) for s in runs for f in s.files),
                         title=f"Pretrain, transfer, compare: {' vs '.join(plan.backbones)} at width {plan.width:g} "
                               f"on {where}",
                         notes=notes, chance={dataset: chance} if chance else None,
                         headline=_scale_line(plan) + headline_lines(results),  # the control, then every call
                         figures=scatter + _degradation_section(results, plan, stages, out / "report", responses),
                         details=leaderboard + _control_details(results),
                         comparisons=results.lookup,  # the table prints the job's family, adjusted as one
                         compared_metric=COMPARED_METRICS[0])
    results.wall_minutes = round((time.time() - t_start) / 60.0, 1) if timed else None
    results.machine, results.date = machine_text(), time.strftime("%Y-%m-%d")
    summary = "\n".join(summary_lines(results, plan, chance, results.data))
    atomic_write_text(out / JOB_SUMMARY, summary + "\n")
    atomic_write_text(out / JOB_RESULTS, strict_json(results.to_json(), default=str))  # NaN (undefined) as null
    print("\n" + summary)
    print(f"[main job] report: {paths['html']}")
    print(f"[main job] total {(time.time() - t_start) / 60:.1f} min ({args.jobs} stage(s) at a time, {threads} "
          "thread(s) each)")
    return 0
