"""Performance against the references, measured side by side in one run (tools/benchmark.py; BENCHMARKS.md).

Every comparison alternates the sides (ours, reference, ours, reference, ...) for --repeats rounds after 2 warm-up
rounds and reports the median of the per-round ratios reference_time / our_time with a bootstrap 95% interval over
the rounds. A result is labelled "faster" only when the whole interval is above 1.0, "slower" when it is below,
"parity" otherwise. The JSON records threads, layout and the torch / oneDNN versions beside every figure.

    python tools/benchmark.py                          # every section, ~45 minutes on 2 CPU cores
    python tools/benchmark.py --only backbone --repeats 9 --markdown BENCHMARKS-run.md

Sections (one module each in tools/benchmarks/): backbone (ours vs torchvision, R-50 / R-101 / VGG-16, training and
inference; channels-last variants), detector (our R-101-C4 vs Detectron2's built-in R-101-C4, same settings, shorter
side 600), main_job (one training step of each main-job leg as detection/main_job/leg.py builds it, norm folding on
vs off, fraction of matmul peak, per-op profile), main_job_pretrain (pretraining images/s: the embedded cache vs
--no-embedded-cache), main_job_detect_vs_commit (detection iterations/s: an earlier commit's own code in a worker
process vs this tree's), cocoeval (faster-coco-eval vs pycocotools, 5,000 images), peak (backbone GFLOP/s vs a large
matmul), inference (the fast inference path vs eager and vs torchvision / Detectron2 given the same path; GFLOP/s as
a share of the matmul peak, compile seconds), loader (train-loader images/s vs the C4 step's consumption), memory
(peak RSS of an R-101-C4 training iteration), and on generated full-size files in the real formats (written once
under output/benchmark/generated/): coco_train_load (a train2017-sized json to training dicts vs Detectron2's
trainer path), voc07_eval (VOC2007 test vs py-faster-rcnn's voc_eval), coco_val_eval (val2017 with 500k detections
vs faster-coco-eval alone), folder_scan (an ImageNet-sized folder vs torchvision's ImageFolder); each also measures
both sides' peak memory in fresh processes and checks that the results are identical.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json

from . import checkout
from .backbone import bench_backbone
from .coco_train_load import bench_coco_train_load
from .coco_val_eval import bench_coco_val_eval
from .cocoeval import bench_cocoeval
from .detector import bench_detector
from .folder_scan import bench_folder_scan
from .inference import bench_inference
from .loader import bench_loader
from .main_job import bench_main_job
from .memory import bench_memory
from .peak import bench_peak
from .pretrain import bench_main_job_pretrain
from .stats import machine
from .voc07_eval import bench_voc07_eval
from .vs_commit import BASELINE_COMMIT, bench_main_job_detect_vs_commit

__all__ = ["SECTIONS", "markdown", "main"]

SECTIONS = {"backbone": bench_backbone, "detector": bench_detector, "main_job": bench_main_job,
            "main_job_pretrain": bench_main_job_pretrain,
            "main_job_detect_vs_commit": bench_main_job_detect_vs_commit,
            "cocoeval": bench_cocoeval, "peak": bench_peak, "inference": bench_inference, "loader": bench_loader,
            "memory": bench_memory,
            "coco_train_load": bench_coco_train_load, "voc07_eval": bench_voc07_eval,
            "coco_val_eval": bench_coco_val_eval, "folder_scan": bench_folder_scan}
# the sections on generated full-size dataset files (generated.py): --data-scale shrinks them
DATA_SECTIONS = ("coco_train_load", "voc07_eval", "coco_val_eval", "folder_scan")

RATIO_KEYS = ("ratio", "ci95", "verdict", "rounds")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict) and "ratio" in v:
        lo, hi = v["ci95"]
        return f"{v['ratio']:.2f}x [{lo:.2f}, {hi:.2f}] {v['verdict']} ({v['rounds']} rounds)"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list) and v and all(isinstance(x, float) for x in v):
        return "[" + ", ".join(f"{x:.3g}" for x in v) + "]"
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return "; ".join(f"{d['op']} {d['self_ms_per_iter']} ms ({100 * d['share']:.0f}%)" for d in v)
    return str(v)


def markdown(results: dict, argv: list[str]) -> str:
    lines = [f"Command: `python tools/benchmark.py {' '.join(argv)}`. Machine: {_fmt(results['machine'])}.", ""]
    for name in [n for n in SECTIONS if n in results]:
        lines.append(f"### {name}")
        for k, v in results[name].items():
            if isinstance(v, dict) and "ratio" not in v and any(isinstance(x, dict) for x in v.values()):
                lines += [f"- {k}:"] + [f"  - {kk}: {_fmt(x)}" for kk, x in v.items()]
            else:
                lines.append(f"- {k}: {_fmt(v)}")
                if isinstance(v, dict) and "ratio" in v:  # what was measured beside the ratio (times, profile)
                    lines += [f"  - {kk}: {_fmt(x)}" for kk, x in v.items() if kk not in RATIO_KEYS]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tools/benchmark.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds per comparison (at least 7 for a CI)")
    ap.add_argument("--json", default=None,
                    help="where the figures go (default: output/benchmark/benchmark.json in the checkout)")
    ap.add_argument("--markdown", default=None, help="also write the figures as Markdown to this file")
    ap.add_argument("--baseline-commit", default=BASELINE_COMMIT,
                    help="main_job_detect_vs_commit: the commit whose code is the other side (default: the main "
                         "job before its detection-iteration efficiency work)")
    ap.add_argument("--data-scale", type=float, default=1.0,
                    help=f"{', '.join(DATA_SECTIONS)}: the generated files' size (1: the real datasets' sizes)")
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads (default: every CPU); the main job runs each stage at 1, two at a time")
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (7 or more for a meaningful interval)")
    if not 0 < args.data_scale <= 1:
        ap.error("--data-scale must be in (0, 1]")
    if args.threads is not None and args.threads < 1:
        ap.error("--threads must be at least 1")
    json_path = Path(args.json) if args.json else checkout().root / "output" / "benchmark" / "benchmark.json"
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    results = {"machine": machine()}
    for name in args.only:
        t0 = time.time()
        print(f"[benchmark] {name} ...", flush=True)
        kwargs = {"commit": args.baseline_commit} if name == "main_job_detect_vs_commit" else \
            {"scale": args.data_scale} if name in DATA_SECTIONS else {}
        results[name] = SECTIONS[name](args.repeats, **kwargs)
        results[name]["section_seconds"] = round(time.time() - t0, 1)
        for k, v in results[name].items():
            print(f"  {k}: {_fmt(v)}", flush=True)
        # written after every section: a later failure does not lose the sections already measured
        json_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json_path, strict_json(results, default=str))  # a NaN reference AP as null
        if args.markdown:
            atomic_write_text(Path(args.markdown), markdown(results, sys.argv[1:] if argv is None else argv))
    print(f"[benchmark] wrote {json_path}")
    return 0
