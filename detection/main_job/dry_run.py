"""What --dry-run prints: the stages with their step times measured here, each backbone's costs, the data scale's
GPU-hours and the paper scale's (paper_cost: estimates from mult-adds); nothing is run."""

from __future__ import annotations

from pathlib import Path

from ..config import get_detection_cfg
from ..project import project_files
from .arms import ARMS
from .data import data_paths
from .graph import INFERENCE_PER_STEP, Estimator
from .leg_configs import leg_config_files, paper_config
from .paper_cost import IMAGENET_BATCH, IMAGENET_ITERATIONS, detection_gmacs, gpu_hours, paper_cost
from .plan import MainJobPlan, Stage
from .resolution import expected_resolution, resolution_lines
from .results import COMPARED_METRICS

__all__ = ["print_dry_run", "print_paper_dry_run"]


def _print_backbone_costs(plan: MainJobPlan, stages: list[Stage], estimator: Estimator, tflops: float) -> None:
    """Per backbone: its stages, parameters and GMACs at the job's width (224 px, paper Table 1 counting, 10
    classes), and the CPU minutes its stages take here one after another; then the paper-scale GPU-hours."""
    from backbones import complexity, create_model

    print(f"[main job] per backbone at width {plan.width:g} (CPU minutes: its stages one after another here):")
    for b in plan.backbones:
        own = [s for s in stages if s.model == b]
        c = complexity(create_model(b, num_classes=10, **plan.pretrain_options(b)))
        source = f"weights {plan.weights_of(b).name}" if plan.weights_of(b) else "pretrained here"
        print(f"  {b:<10} {len(own)} stages ({source}), {c.params / 1e6:.2f}M params, {c.macs / 1e9:.2f} GMACs, "
              f"{sum(estimator.stage_seconds(s) for s in own) / 60:.0f} CPU min")
    if plan.scale == "data":
        _print_data_scale_cost(plan, stages, tflops)
    _print_paper_cost(plan, tflops)


def _print_data_scale_cost(plan: MainJobPlan, stages: list[Stage], tflops: float) -> None:
    """The data scale's detection legs on a GPU: GPU-hours from mult-adds at the legs' input size and width."""
    print(f"[main job] its detection legs on a GPU: an ESTIMATE from mult-adds at {tflops:g} TFLOP/s sustained "
          "(--gpu-tflops; forward + backward = 3 forwards, RPN / data loading / evaluation left out):")
    for b in plan.backbones:
        legs = [s for s in stages if s.model == b and s.kind == "detect"]
        if not legs:
            continue
        scale = plan.data_scale(b, legs[0].variant)
        short, long = plan.detect_data.median_image or (scale.min_size, scale.min_size)
        image = (scale.min_size, min(scale.max_size, round(scale.min_size * long / short)))
        rois = get_detection_cfg(leg_config_files(b, arm=legs[0].variant, scale="data",
                                                  data_format=plan.detect_data.format), [],
                                 read_weights=False).MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
        hours = gpu_hours(detection_gmacs(b, rois, image, plan.width), sum(s.iterations for s in legs) * scale.batch,
                          tflops)
        print(f"  {b:<10} {len(legs)} legs at {image[0]}x{image[1]}, {sum(s.iterations for s in legs):,} iterations "
              f"of {scale.batch}: {hours:.2g} GPU-hours")


def _print_paper_cost(plan: MainJobPlan, tflops: float) -> None:
    """The same comparison at the paper's scale (full width, ImageNet, COCO), per seed: main_job.paper_cost."""
    print(f"[main job] at the paper's scale, per seed (full-width nets, ImageNet pretraining {IMAGENET_ITERATIONS:,} "
          f"iterations of {IMAGENET_BATCH} at 224 px, COCO Faster R-CNN with each backbone's configs/COCO-Detection "
          f"schedule at 600x1000): an ESTIMATE from mult-adds, not a measurement -- forward + backward = 3 forwards, "
          f"{tflops:g} TFLOP/s sustained per GPU assumed (--gpu-tflops), RPN / data loading / evaluation left out:")
    for b in plan.backbones:
        c = paper_cost(b, str(paper_config(b)), tflops)
        print(f"  {b:<10} pretraining {c.pretrain_images / 1e6:.1f}M images x {c.pretrain_gmacs:.1f} GMACs = "
              f"{c.pretrain_gpu_hours:.0f} GPU-hours; detection {c.detect_images / 1e6:.2f}M images x "
              f"{c.detect_gmacs:.0f} GMACs = {c.detect_gpu_hours:.0f} GPU-hours")


def print_paper_dry_run(plan: MainJobPlan, stages: list[Stage], out: Path, tflops: float) -> None:
    """A paper-scale job's stages, what it would read (present or not), and the GPU-hours of each stage from
    mult-adds (paper_cost): nothing is timed on this CPU, nothing is read or run."""
    print(f"[main job] paper scale, {max(1, plan.gpus)} GPU(s) a stage (--gpus-per-stage), {len(stages)} stages; "
          "the data it would read:")
    for p in data_paths(plan.pretrain_data, plan.detect_data, bool(plan.pretrained_here())):
        print(f"  {'present' if Path(p).exists() else 'ABSENT '}  {p}")
    costs = {m: paper_cost(m, str(paper_config(m, plan.detect_data.format)), tflops) for m in plan.backbones}
    total = 0.0
    for s in stages:
        c = costs[s.model]
        hours = (c.pretrain_gpu_hours * s.iterations / IMAGENET_ITERATIONS if s.kind == "pretrain" else
                 c.detect_gpu_hours * ARMS[s.variant].schedule)
        total += hours
        deps = f"  after {', '.join(str(d.relative_to(out)) for d in s.deps)}" if s.deps else ""
        print(f"  {s.kind:<8} {str(s.out.relative_to(out)):<44} {s.iterations:>7} it  {hours:>7.0f} GPU-h{deps}")
    print(f"[main job] about {total:,.0f} GPU-hours in all at {tflops:g} sustained TFLOP/s a GPU (an ESTIMATE from "
          "mult-adds: forward + backward = 3 forwards; RPN, data loading and evaluation left out). Nothing was run.")


def print_dry_run(plan: MainJobPlan, stages: list[Stage], out: Path, estimator: Estimator, args,
                   threads: int) -> None:
    """The stages with their measured step times, the total, and each backbone's costs; nothing runs."""
    for s in stages:
        deps = f"  after {', '.join(str(d.relative_to(out)) for d in s.deps)}" if s.deps else ""
        print(f"  {s.kind:<8} {str(s.out.relative_to(out)):<44} {s.iterations:>6} it x "
              f"{estimator.rate(s) * 1000:.0f} ms{deps}")
    print(f"[main job] estimated {estimator.remaining_minutes(stages, []):.0f} min for all stages (step times "
          f"measured just now on this machine with {threads} thread(s); start-up assumed 15 s a stage, a leg's "
          f"evaluation {INFERENCE_PER_STEP:g} of a step a test image; "
          f"{args.jobs} at a time), plus ~1 min for the dataset, chance level and report. Nothing was run.")
    _print_backbone_costs(plan, stages, estimator, args.gpu_tflops)
    resolution = expected_resolution(plan, stages, args.preset, COMPARED_METRICS[0], args.target_mde,
                                     project_files().root)
    for line in resolution_lines(resolution, args.preset):
        print(line)
