"""The main job: the paper's experiment (Tables 7/8) in miniature -- pretrain, transfer, compare, report.

1. the embedded detection dataset (scenes of Fashion-MNIST objects; val scenes use test-split objects only);
2. ImageNet-style pretraining of VGG-16 (BN variant) and ResNet-101 at reduced width with tools/train_cls.py on
   the Fashion-MNIST *train* items composited on random backgrounds, one recipe for both, with several
   pretraining seeds;
3. Faster R-CNN with each pretrained backbone (the paper's C4 design for ResNet, py-faster-rcnn's fc6/fc7 head for
   VGG; BN frozen, FREEZE_AT 2), detection seeds nested under each pretraining seed, and from-scratch controls
   with the identical detection schedule, all with tools/train_det.py;
4. the chance level, the report and a summary whose every figure is read from the runs.

Stages form a graph (a detector waits for its backbone's pretraining) and run as subprocesses, `jobs` at a time
with `threads` threads each. Each stage writes into its own directory under OUTPUT with the command it ran; a
second run reuses finished stages, resumes interrupted ones, and refuses (rather than overwrites) a stage made
with other settings. `selection=True` is the model-selection variant: pretraining scored on held-out train items
and detection trained on `embedded_train_fit`, scored on `embedded_train_holdout` -- schedules are chosen there,
never on the val split.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .main_job_results import generated_notes, job_results, nested_spread, summary_lines
from .paper_cost import DEFAULT_TFLOPS, IMAGENET_BATCH, IMAGENET_ITERATIONS, paper_cost
from .stages import REPO, STAGE_FILE, STOP_REQUESTED, Estimator, JobStage, StageConflict, run_graph, submit_graph

__all__ = ["leg_config_files", "MainJobPlan", "JobStage", "StageConflict", "plan_stages", "main", "chance_ap",
           "nested_spread", "generated_notes", "summary_lines", "job_results", "run_graph", "Estimator", "QUICK",
           "STAGE_FILE"]

ARCH_CONFIGS = {"vgg": REPO / "configs" / "COCO-Detection" / "faster_rcnn_vgg16.yaml",
                "resnet": REPO / "configs" / "COCO-Detection" / "faster_rcnn_R_101_C4.yaml",
                "plain": REPO / "configs" / "COCO-Detection" / "faster_rcnn_R_101_C4.yaml"}  # by name prefix
SMOKE = REPO / "configs" / "Embedded-Detection" / "smoke.yaml"
PRETRAINED = REPO / "configs" / "Embedded-Detection" / "pretrained.yaml"
LOCK_FILE = ".main_job.lock"


def leg_config_files(model: str, *, pretrained: bool) -> list[str]:
    """The config files of a main-job detection leg: the paper config of the backbone's design, the smoke overlay,
    and for a pretrained leg the transfer overlay (the one definition: the job, its calibration, the benchmark)."""
    arch = next(c for prefix, c in ARCH_CONFIGS.items() if model.startswith(prefix))
    return [str(arch), str(SMOKE)] + ([str(PRETRAINED)] if pretrained else [])


@dataclass(frozen=True)
class MainJobPlan:
    """What the main job runs, with the schedules CONVERGENCE.md measured on held-out training data: the detection
    legs are converged there (doubling 3200 iterations moved AP50 by less than 2 points), and so is pretraining at
    32 epochs (the shortest one recipe with which doubling moves neither net's top-1 error by 2 points)."""

    backbones: tuple[str, ...] = ("vgg16_bn", "resnet101")  # the mission's pair (VGG-16 in its BN variant)
    width: float = 0.25  # channel multiplier of every net (backbones.width); 1.0 is not pretrainable here
    pretrain_image_size: int = 32  # Fashion-MNIST items on 32x32 backgrounds
    pretrain_epochs: float = 32.0  # passes over the training items; held-out error: 16 -> 32 moved ResNet-101 by
    #                                1.9 points, 32 -> 64 VGG-16(BN) by 1.3 (16 -> 32: 2.6; CONVERGENCE.md)
    pretrain_batch: int = 128  # fills 2 cores (tools/benchmark.py main_job section)
    # Each net's reference learning rate -- the one recipe difference, measured necessary: at a shared 0.1 VGG's
    # fc6 ReLUs all die within 100 iterations, at a shared 0.01-0.02 ResNet-101 stays near chance.
    pretrain_lr: tuple[tuple[str, float], ...] = (("vgg", 0.01), ("resnet", 0.1), ("plain", 0.1))  # prefix -> lr
    pretrain_seeds: tuple[int, ...] = (0, 1)  # initialisation, data order and augmentation of the pretraining
    pretrain_val_images: int = 2000  # the first 2,000 Fashion-MNIST test items, composited
    pretrain_train_images: int | None = None  # None: all training items (60,000 for Fashion-MNIST)
    pretrain_holdout: int = 5000  # selection=True: the last N train items are the val set instead
    detect_iterations: int = 3200  # of 2 images, lr x0.1 for the last 20%; 1600 -> 3200 moved ResNet-101 +5.9
    #                                AP50 on the held-out training scenes, 3200 -> 6400 +0.3 (CONVERGENCE.md)
    detect_seeds: tuple[int, ...] = (0, 1)  # nested under every pretraining seed
    scratch: tuple[str, ...] = ("vgg16_bn", "resnet101")  # from-scratch controls (first detection seed)
    selection: bool = False  # the model-selection variant (held-out training data; see the module docstring)

    def lr_for(self, model: str) -> float:
        """VGG: 0.01 (Simonyan & Zisserman; torchvision's recipe), ResNet / plain: 0.1 (He et al.)."""
        return next(lr for prefix, lr in self.pretrain_lr if model.startswith(prefix))

    def pretrain_items(self) -> int:
        from classification.data.objects import load_object_source

        n = len(load_object_source("train").labels) - (self.pretrain_holdout if self.selection else 0)
        return min(n, self.pretrain_train_images) if self.pretrain_train_images else n

    def pretrain_iterations(self) -> int:
        return max(1, math.ceil(self.pretrain_epochs * self.pretrain_items() / self.pretrain_batch))

    def pretrain_args(self, model: str, seed: int, out: Path) -> list[str]:
        iterations = self.pretrain_iterations()
        options = [f"width={self.width}"]
        if model.startswith("resnet"):  # Goyal et al.: each block starts as the identity; without it ResNet-101
            options.append("zero_init_residual=True")  # at this width stays at chance
        val = (["--holdout", str(self.pretrain_holdout)] if self.selection else
               ["--val-samples", str(self.pretrain_val_images)])
        return [str(REPO / "tools" / "train_cls.py"), "--model", model,
                *[a for o in options for a in ("--model-option", o)],
                "--dataset", "embedded", "--image-size", str(self.pretrain_image_size),
                "--iterations", str(iterations), "--batch-size", str(self.pretrain_batch),
                "--lr", str(self.lr_for(model)), "--warmup-iterations", "20",
                "--eval-period", str(max(1, iterations // 8)), "--checkpoint-period", str(max(1, iterations // 8)),
                "--keep-checkpoints", "1",  # a resume needs the newest; an hour-long stage loses at most 1/8
                *val, "--workers", "1", "--seed", str(seed),
                *(["--train-samples", str(self.pretrain_train_images)] if self.pretrain_train_images else []),
                "--output-dir", str(out)]

    def detect_args(self, model: str, weights: Path | None, seed: int, out: Path) -> list[str]:
        configs = leg_config_files(model, pretrained=weights is not None)
        n = self.detect_iterations
        schedule = ["SOLVER.MAX_ITER", str(n), "SOLVER.STEPS", f"({max(1, int(0.8 * n))},)",
                    "SOLVER.WARMUP_ITERS", str(min(20, max(1, n // 4))), "SOLVER.CHECKPOINT_PERIOD",
                    str(max(1, n // 2))]
        data = (["DATASETS.TRAIN", '("embedded_train_fit",)', "DATASETS.TEST", '("embedded_train_holdout",)']
                if self.selection else [])
        return [str(REPO / "tools" / "train_det.py"), *[a for c in configs for a in ("--config-file", str(c))],
                "MODEL.BACKBONES.NAME", model, "MODEL.BACKBONES.WIDTH", str(self.width),
                "MODEL.WEIGHTS", str(weights or ""), "SEED", str(seed), "OUTPUT_DIR", str(out), *schedule, *data]


# The fast smoke path (`make demo-quick`): one seed of each, short schedules; shows the pipeline, not converged.
QUICK = {"pretrain_epochs": 1.0, "pretrain_seeds": (0,), "detect_seeds": (0,), "detect_iterations": 400}


def plan_stages(plan: MainJobPlan, out: Path) -> list[JobStage]:
    stages = []
    p_iters = plan.pretrain_iterations()
    for model in plan.backbones:
        for ps in plan.pretrain_seeds:
            d = out / "pretrain" / f"{model}_p{ps}"
            stages.append(JobStage(f"pretrain {model} x{plan.width:g}, seed {ps} ({p_iters} iterations of "
                                f"{plan.pretrain_batch}, {plan.pretrain_image_size} px)", d,
                                plan.pretrain_args(model, ps, d), "pretrain", model, "", p_iters, pretrain_seed=ps))
    n = plan.detect_iterations
    for model in plan.backbones:
        for ps in plan.pretrain_seeds:
            weights = out / "pretrain" / f"{model}_p{ps}" / "model_final.pth"
            for ds in plan.detect_seeds:
                d = out / "detect" / f"{model}_p{ps}_d{ds}"
                stages.append(JobStage(f"Faster R-CNN {model}, pretraining seed {ps}, detection seed {ds}", d,
                                    plan.detect_args(model, weights, ds, d), "detect", model, "pretrained", n,
                                    f"{model}_pretrained", [weights.parent], ps, ds))
    for model in plan.scratch:
        ds = plan.detect_seeds[0]
        d = out / "detect" / f"{model}_scratch_d{ds}"
        stages.append(JobStage(f"Faster R-CNN {model} from scratch (control), detection seed {ds}", d,
                            plan.detect_args(model, None, ds, d), "detect", model, "scratch", n, f"{model}_scratch",
                            detect_seed=ds))
    return stages


# ---- time estimates: measured step times, replaced by each stage's own iterations as they run -------------------

def measure_step_seconds(plan: MainJobPlan, threads: int, keys: set[tuple[str, str, str]]) -> dict:
    """Seconds per training iteration of each (kind, model, init) in `keys`, timed here over 3 steps after 2
    warm-up steps with `threads` threads (the calibration behind --dry-run and the first estimate)."""
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for kind, model, init in sorted(keys):
        if kind == "pretrain":
            rates[(kind, model, init)] = _pretrain_step_seconds(plan, model)
        else:
            rates[(kind, model, init)] = _detect_step_seconds(plan, model, init)
    return rates


def _timed(step, warmup: int = 2, repeats: int = 3) -> float:
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - t0) / repeats


def _pretrain_step_seconds(plan: MainJobPlan, model: str) -> float:
    import torch

    from backbones import create_model

    opts = {"zero_init_residual": True} if model.startswith("resnet") else {}
    net = create_model(model, num_classes=10, width=plan.width, **opts).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    s = plan.pretrain_image_size
    x = torch.randn(plan.pretrain_batch, 3, s, s).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (plan.pretrain_batch,))

    def step():
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return _timed(step)


def _detect_step_seconds(plan: MainJobPlan, model: str, init: str) -> float:
    from detectron2.modeling import build_model

    from ..config import get_detection_cfg
    from .data import build_train_loader
    from .optimizer import build_optimizer

    cfg = get_detection_cfg(leg_config_files(model, pretrained=init == "pretrained"),
                            ["MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NAME", model, "MODEL.BACKBONES.WIDTH",
                             str(plan.width), "DATALOADER.NUM_WORKERS", "0"])
    net = build_model(cfg)
    net.train()
    opt = build_optimizer(cfg, net)
    loader = build_train_loader(cfg)
    batches = iter(loader)

    def step():
        losses = net(next(batches))
        opt.zero_grad()
        sum(losses.values()).backward()
        opt.step()

    from detectron2.utils.events import EventStorage

    with EventStorage(0):  # the RPN logs into it
        return _timed(step)


# ---- chance, spreads, summary -----------------------------------------------------------------------------------

def chance_ap(dataset: str = "embedded_val", boxes_per_image: int = 100, seed: int = 0) -> dict[str, float]:
    """COCO AP of uniformly random boxes, scores and classes on `dataset`: the floor a detector must clear."""
    import io

    import numpy as np
    from detectron2.data import DatasetCatalog, MetadataCatalog
    from pycocotools.coco import COCO

    from ..evaluation import evaluate_coco

    records = DatasetCatalog.get(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(MetadataCatalog.get(dataset).json_file)
    rng = np.random.default_rng(seed)
    cat_ids = sorted(coco.getCatIds())
    results = []
    for rec in records:
        w, h = rec["width"], rec["height"]
        for _ in range(boxes_per_image):
            x0, y0 = rng.uniform(0, w - 8), rng.uniform(0, h - 8)
            bw, bh = rng.uniform(8, w - x0), rng.uniform(8, h - y0)
            results.append({"image_id": rec["image_id"], "category_id": int(rng.choice(cat_ids)),
                            "bbox": [x0, y0, bw, bh], "score": float(rng.uniform())})
    return evaluate_coco(coco, results).stats


# ---- the command line ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    d = MainJobPlan()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output-dir", default="output/main_job", help="every stage, the report and the summary go here")
    ap.add_argument("--fresh", action="store_true",
                    help="delete the stages, report and summary this job made under OUTPUT first, then run all")
    ap.add_argument("--quick", action="store_true",
                    help=f"the smoke path (make demo-quick): {QUICK}; shows the pipeline, not converged")
    ap.add_argument("--selection", action="store_true",
                    help="model selection on held-out training data (pretraining: the last 5,000 train items; "
                         "detection: embedded_train_fit -> embedded_train_holdout); never the val split")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the stages and the estimated minutes here, and the GPU-hours the comparison would "
                         "take at the paper's scale (an estimate from mult-adds); run nothing")
    ap.add_argument("--gpu-tflops", type=float, default=DEFAULT_TFLOPS,
                    help="--dry-run: the sustained TFLOP/s per GPU assumed for the paper-scale estimate "
                         f"(default {DEFAULT_TFLOPS:g}: a guess, printed beside the figure)")
    ap.add_argument("--with-plain", action="store_true", help="add plain-101 (pretrained + scratch)")
    ap.add_argument("--backbones", nargs="+", default=None, help=f"default: {' '.join(d.backbones)}")
    ap.add_argument("--pretrain-seeds", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", "--detect-seeds", dest="detect_seeds", type=int, nargs="+", default=None,
                    help="detection seeds, nested under every pretraining seed (the scratch controls use the first)")
    ap.add_argument("--pretrain-epochs", type=float, default=None)
    ap.add_argument("--pretrain-images", type=int, default=None,
                    help="use only the first N training items (default: all)")
    ap.add_argument("--pretrain-val-images", type=int, default=None)
    ap.add_argument("--detect-iterations", type=int, default=None)
    cpus = os.cpu_count() or 1
    ap.add_argument("--jobs", type=int, default=min(2, cpus),
                    help="stages run at once (default: 2 on 2+ cores -- measured faster than one stage with 2 "
                         "threads, tools/benchmark.py main_job)")
    ap.add_argument("--threads", type=int, default=None, help="threads per stage (default: cores / jobs)")
    g = ap.add_argument_group("Slurm (one job per stage, afterok dependencies, the report last)")
    g.add_argument("--slurm", action="store_true", help="submit the stages to Slurm instead of running them here")
    g.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    g.add_argument("--timeout", type=int, default=240, help="minutes per stage job (requeued and resumed after)")
    g.add_argument("--gpus-per-stage", type=int, default=0, help="GPUs per stage job (0: the CPU stages here)")
    g.add_argument("--report-only", action="store_true",
                   help="only write the report and summary of finished stages (the last job of --slurm)")
    return ap


def plan_from_args(args) -> MainJobPlan:
    d = MainJobPlan()
    base = replace(d, **QUICK) if args.quick else d
    backbones = tuple(args.backbones) if args.backbones else base.backbones
    extra = ("plain101",) if args.with_plain and "plain101" not in backbones else ()
    changes = {"backbones": backbones + extra, "selection": args.selection, "scratch": backbones + extra}
    for name, value in (("pretrain_seeds", args.pretrain_seeds), ("detect_seeds", args.detect_seeds),
                        ("pretrain_epochs", args.pretrain_epochs), ("pretrain_train_images", args.pretrain_images),
                        ("pretrain_val_images", args.pretrain_val_images),
                        ("detect_iterations", args.detect_iterations)):
        if value is not None:
            changes[name] = tuple(value) if isinstance(value, list) else value
    plan = replace(base, **changes)
    _validate(plan)
    return plan


def _validate(plan: MainJobPlan) -> None:
    from backbones import list_models

    known = set(list_models())
    for b in plan.backbones:
        if b not in known or not any(b.startswith(p) for p in ARCH_CONFIGS):
            raise SystemExit(f"error: --backbones {b!r}: not a VGG / ResNet / plain model of backbones.list_models()")
    for name in ("pretrain_seeds", "detect_seeds"):
        seeds = getattr(plan, name)
        if len(set(seeds)) != len(seeds):
            raise SystemExit(f"error: --{name.replace('_', '-')} lists a seed twice ({list(seeds)}): n would count "
                             "one run twice")
        if any(s < 0 for s in seeds):
            raise SystemExit(f"error: --{name.replace('_', '-')} must be >= 0")
    for name in ("pretrain_epochs", "detect_iterations", "pretrain_val_images"):
        if not getattr(plan, name) > 0:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be positive, got {getattr(plan, name)}")


def _print_paper_cost(plan: MainJobPlan, tflops: float) -> None:
    """The same comparison at the paper's scale (full width, ImageNet, COCO), per seed: detection.engine.paper_cost."""
    print(f"[main job] at the paper's scale, per seed (full-width nets, ImageNet pretraining {IMAGENET_ITERATIONS:,} "
          f"iterations of {IMAGENET_BATCH} at 224 px, COCO Faster R-CNN with each backbone's configs/COCO-Detection "
          f"schedule at 600x1000): an ESTIMATE from mult-adds, not a measurement -- forward + backward = 3 forwards, "
          f"{tflops:g} TFLOP/s sustained per GPU assumed (--gpu-tflops), RPN / data loading / evaluation left out:")
    for b in plan.backbones:
        c = paper_cost(b, str(next(cfg for prefix, cfg in ARCH_CONFIGS.items() if b.startswith(prefix))), tflops)
        print(f"  {b:<10} pretraining {c.pretrain_images / 1e6:.1f}M images x {c.pretrain_gmacs:.1f} GMACs = "
              f"{c.pretrain_gpu_hours:.0f} GPU-hours; detection {c.detect_images / 1e6:.2f}M images x "
              f"{c.detect_gmacs:.0f} GMACs = {c.detect_gpu_hours:.0f} GPU-hours")


def _fresh(out: Path, log) -> None:
    """Delete only what a main job made: stage directories holding a stage record, the report, the summary."""
    removed = 0
    for record in sorted(out.glob(f"*/*/{STAGE_FILE}")):
        shutil.rmtree(record.parent)
        removed += 1
    for p in (out / "report", out / "summary.txt", out / "results.json"):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    log(f"[main job] --fresh: removed {removed} stage directories, the report and the summary under {out}")


def main(argv: list[str] | None = None) -> int:
    """The job; Ctrl-C anywhere in it (time estimate, dataset, stages, report) ends it with one line, exit 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("\n[main job] interrupted; finished stages are kept, a rerun resumes the others", file=sys.stderr)
        return 130


def _interrupt(signum, frame):
    STOP_REQUESTED.set()  # seen by run_graph even where Python swallows the exception (a fork hook)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = plan_from_args(args)
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        raise SystemExit("error: --jobs and --threads must be >= 1")
    if not args.gpu_tflops > 0:
        raise SystemExit(f"error: --gpu-tflops must be positive, got {args.gpu_tflops}")
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    out = Path(args.output_dir).resolve()
    t_start = time.time()
    stages = plan_stages(plan, out)
    if args.slurm and not args.dry_run:
        return _submit_to_slurm(args, argv, stages, threads, out)
    if args.report_only:
        missing = [s for s in stages if not ((s.out / STAGE_FILE).is_file() and s.done())]
        if missing:
            print("[main job] error: --report-only: unfinished stages: " + "; ".join(s.title for s in missing),
                  file=sys.stderr)
            return 1
        return _report(plan, stages, out, t_start, args, threads)
    # time only the kinds of stage still to run: a rerun whose stages are all finished starts no calibration
    keys = {s.rate_key for s in stages if not ((s.out / STAGE_FILE).is_file() and s.done())}
    print(f"[main job] {len(stages)} stages, {args.jobs} at a time with {threads} thread(s) each; measuring a few "
          "training steps of each kind for the time estimate ...", flush=True)
    import detection  # noqa: F401  (registers the embedded datasets)
    from detection.datasets import ensure_embedded_dataset

    manifest = ensure_embedded_dataset()
    estimator = Estimator(measure_step_seconds(plan, threads, keys), args.jobs)
    minutes = estimator.remaining_minutes(stages, [])
    if args.dry_run:
        for s in stages:
            deps = f"  after {', '.join(str(d.relative_to(out)) for d in s.deps)}" if s.deps else ""
            print(f"  {s.kind:<8} {str(s.out.relative_to(out)):<32} {s.iterations:>6} it x "
                  f"{estimator.rate(s) * 1000:.0f} ms{deps}")
        print(f"[main job] estimated {minutes:.0f} min for all stages (step times measured just now on this machine "
              f"with {threads} thread(s); start-up and evaluation assumed 15 s a stage; {args.jobs} at a time), "
              "plus ~1 min for the dataset, chance level and report. Nothing was run.")
        _print_paper_cost(plan, args.gpu_tflops)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / LOCK_FILE, "w")
    try:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"[main job] error: another main job is running in {out}", file=sys.stderr)
        return 1
    if args.fresh:
        _fresh(out, print)
    print(f"[main job] {manifest['source']} objects, classes {manifest['classes']}, "
          f"{manifest['counts']['train']['images']} train / {manifest['counts']['val']['images']} val images; "
          f"about {minutes:.0f} min of stages (measured step times)", flush=True)
    # `kill PID` (SIGTERM) stops the job as Ctrl-C does: its stages are told to stop, not left running alone
    STOP_REQUESTED.clear()
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Ctrl-C too (an ignored SIGINT stays ignored)
        signal.signal(signal.SIGINT, _interrupt)
    try:
        run_graph(stages, args.jobs, threads, estimator, lambda m: print(m, flush=True))
    except RuntimeError as err:  # a failed stage, or a StageConflict
        print(f"[main job] error: {err}", file=sys.stderr)
        return 1
    return _report(plan, stages, out, t_start, args, threads)


def _submit_to_slurm(args, argv: list[str] | None, stages: list, threads: int, out: Path) -> int:
    """Every unfinished stage as a Slurm job after its dependencies, then this command with --report-only."""
    import detection  # noqa: F401
    from detection.datasets import ensure_embedded_dataset

    ensure_embedded_dataset()  # generated once here, not by the first stage jobs at the same time
    out.mkdir(parents=True, exist_ok=True)
    given = list(sys.argv[1:] if argv is None else argv)
    report = ["tools/main_job.py", *[a for a in given if a not in ("--slurm", "--fresh")], "--output-dir", str(out),
              "--report-only"]
    if args.fresh:
        _fresh(out, print)
    try:
        ids = submit_graph(stages, threads, out / "slurm", final=report, partition=args.partition,
                           timeout_min=args.timeout, gpus=args.gpus_per_stage, log=lambda m: print(m, flush=True))
    except (RuntimeError, SystemExit) as err:  # a StageConflict, or a request the partition cannot run
        print(f"[main job] {err if str(err).startswith('error') else f'error: {err}'}", file=sys.stderr)
        return 1
    print(f"[main job] {len(ids) - 1} stage job(s) and the report job {ids['report']} submitted; watch them with "
          f"`squeue -j {','.join(ids.values())}`; stage logs in each stage directory (stage.log), Slurm's in "
          f"{out / 'slurm'}; the report and summary.txt appear in {out} when the last job ends", flush=True)
    return 0


def _report(plan, stages: list, out: Path, t_start: float, args, threads: int) -> int:
    print(f"[main job] chance level and report ({(time.time() - t_start) / 60:.1f} min so far)", flush=True)
    import detection  # noqa: F401  (registers the embedded datasets)
    from detection.datasets import ensure_embedded_dataset
    from detection.report import strict_json, write_report

    manifest = ensure_embedded_dataset()

    dataset = "embedded_train_holdout" if plan.selection else "embedded_val"
    chance = chance_ap(dataset)
    runs = [s for s in stages if s.kind == "detect"]
    results = job_results(stages, plan)
    notes = generated_notes(results, plan)
    paths = write_report([s.out for s in runs], out / "report", groups=[s.group for s in runs],
                         title=f"Pretrain, transfer, compare: {' vs '.join(plan.backbones)} at width {plan.width:g} "
                               f"on the embedded default{' (model selection)' if plan.selection else ''}",
                         notes=notes, chance={dataset: chance})
    summary = "\n".join(summary_lines(results, plan, chance, manifest))
    (out / "summary.txt").write_text(summary + "\n")
    (out / "results.json").write_text(strict_json(results))  # NaN (undefined) as null: valid JSON
    print("\n" + summary)
    print(f"[main job] report: {paths['html']}")
    print(f"[main job] total {(time.time() - t_start) / 60:.1f} min ({args.jobs} stage(s) at a time, {threads} "
          "thread(s) each)")
    return 0
