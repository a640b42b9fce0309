#!/usr/bin/env python3
"""The CUDA check for the first GPU machine (`make device-check`): under 8 minutes on one GPU.

1. the tests marked `cuda` (tests/tools/test_cuda.py: BN folding, RoIAlign, channels_last, the classification AMP step
   and its GradScaler resume, Detectron2's AMPTrainer with our R-101-C4 and VGG-16 detectors, a 2-process NCCL launch
   when two GPUs are visible);
2. timings side by side (alternating rounds, median ratio with a bootstrap 95% interval, as tools/benchmark.py):
   our R-101-C4 and VGG-16 detectors vs Detectron2's built-in R-101-C4, training and inference at 600x1000 with 2
   images, fp32 and AMP; backbone inference vs torchvision (batch 32 at 224, channels_last for both);
3. one JSON and one Markdown file (default output/device_check/) with the GPU, torch / CUDA / cuDNN versions and
   every figure; exit 1 if any check failed.

    python tools/device_check.py --list      # what it would run (no GPU needed)
    python tools/device_check.py             # on a CUDA machine; without one: one line, exit 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)
import torch

from backbones.strict_json import strict_json

REPO = Path(__file__).resolve().parent.parent
TIMINGS = [
    ("detector_r101_c4_train", "our R-101-C4 vs Detectron2's built-in R-101-C4, training step, 2 images 600x1000"),
    ("detector_r101_c4_infer", "the same, inference (300 proposals)"),
    ("detector_vgg16_train", "our VGG-16 (fc6/fc7 head) vs Detectron2's R-101-C4, training step (same images)"),
    ("detector_vgg16_infer", "the same, inference"),
    ("backbone_infer", "R-50 / R-101 / VGG-16 inference vs torchvision, batch 32 at 224, channels_last"),
]


def _cuda_tests() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "cuda",
                           "tests/tools/test_cuda.py"], cwd=REPO, capture_output=True, text=True)
    return [ln for ln in proc.stdout.splitlines() if "::" in ln]


def run_cuda_tests(out: Path) -> dict:
    t0 = time.time()
    junit = out / "cuda_tests.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests/tools/test_cuda.py", "-p",
                           "no:cacheprovider", f"--junitxml={junit}"], cwd=REPO, capture_output=True, text=True,
                          timeout=420)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return {"ok": proc.returncode == 0, "summary": tail, "seconds": round(time.time() - t0, 1),
            "output_tail": proc.stdout[-4000:]}


def _sync_timed(fn):
    def run():
        fn()
        torch.cuda.synchronize()
    return run


def _detector_timings(repeats: int) -> dict:
    import detection  # noqa: I001  (first: lets Detectron2 import without its compiled ops)
    from detectron2.modeling import build_model
    from detectron2.utils.events import EventStorage

    from benchmarks import checkout
    from benchmarks.detector import build_detector_pair, detector_cfgs, detector_inputs
    from benchmarks.stats import alternate, ratio_stats
    from detection.main_job.leg import calibrate_frozen_bn

    ours_cfg, d2_cfg = detector_cfgs()
    vgg_cfg = detection.get_detection_cfg(str(checkout().config("COCO-Detection", "faster_rcnn_vgg16.yaml")),
                                ["MODEL.WEIGHTS", ""])
    for cfg in (ours_cfg, d2_cfg, vgg_cfg):
        cfg.defrost()
        cfg.MODEL.DEVICE = "cuda"
        cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST = 600, 1000
    ours, d2 = build_detector_pair(ours_cfg, d2_cfg)  # the same weights, pretrained-like FrozenBN scales
    models = {"ours": ours, "detectron2": d2, "vgg16": calibrate_frozen_bn(build_model(vgg_cfg))}
    batch = detector_inputs(600, 1000) + detector_inputs(600, 1000)
    opts = {k: torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-4) for k, m in models.items()}
    scalers = {k: torch.amp.GradScaler("cuda") for k in models}

    def train(k, amp):
        def step():
            m = models[k].train()
            with EventStorage(0), torch.autocast("cuda", enabled=amp):
                loss = sum(m(batch).values())
            opts[k].zero_grad()
            scalers[k].scale(loss).backward()
            scalers[k].step(opts[k])
            scalers[k].update()
        return _sync_timed(step)

    infer_batch = [{k: v for k, v in x.items() if k != "instances"} for x in batch]

    def infer(k, amp):
        def step():
            m = models[k].eval()
            with torch.inference_mode(), torch.autocast("cuda", enabled=amp):
                m(infer_batch)
        return _sync_timed(step)

    res = {}
    for amp in (False, True):
        tag = "amp" if amp else "fp32"
        for ours, name in (("ours", "r101_c4"), ("vgg16", "vgg16")):
            for kind, fn in (("train", train), ("infer", infer)):
                t = alternate({"ours": fn(ours, amp), "detectron2": fn("detectron2", amp)}, repeats)
                res[f"detector_{name}_{kind}_{tag}"] = {"s_ours": statistics.median(t["ours"]),
                                                        "s_detectron2_r101_c4": statistics.median(t["detectron2"]),
                                                        **ratio_stats(t["detectron2"], t["ours"])}
    return res


def _backbone_timings(repeats: int) -> dict:
    import torchvision

    import backbones
    from benchmarks.stats import alternate, ratio_stats

    x = torch.randn(32, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    res = {}
    for name in ("resnet50", "resnet101", "vgg16"):
        ours = backbones.create_model(name).cuda().eval().to(memory_format=torch.channels_last)
        tv = getattr(torchvision.models, name)(weights=None).cuda().eval().to(memory_format=torch.channels_last)
        with torch.inference_mode():
            t = alternate({"ours": _sync_timed(lambda m=ours: m(x)), "tv": _sync_timed(lambda m=tv: m(x))}, repeats)
        res[f"backbone_infer_{name}"] = {"s_ours": statistics.median(t["ours"]), "s_torchvision":
                                         statistics.median(t["tv"]), **ratio_stats(t["tv"], t["ours"])}
    return res


def device_info() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"gpu": p.name, "gpus_visible": torch.cuda.device_count(), "memory_gib": round(p.total_memory / 2**30, 1),
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def markdown(results: dict) -> str:
    info = results["device"]
    lines = ["# Device check", "", f"GPU: {info['gpu']} ({info['gpus_visible']} visible, {info['memory_gib']} GiB); "
             f"torch {info['torch']}, CUDA {info['cuda']}, cuDNN {info['cudnn']}; {info['date']}.", "",
             f"## CUDA tests: {'passed' if results['tests']['ok'] else 'FAILED'}", "",
             f"`{results['tests']['summary']}` ({results['tests']['seconds']} s)", "", "## Timings", "",
             "| what | ours (s) | reference (s) | ratio [95% interval] | verdict |", "|---|---|---|---|---|"]
    for k, v in results.get("timings", {}).items():
        if isinstance(v, dict) and "ratio" in v:
            times = [x for kk, x in v.items() if kk.startswith("s_")]
            lines.append(f"| {k} | {times[0]:.4f} | {times[1]:.4f} | {v['ratio']:.2f}x [{v['ci95'][0]:.2f}, "
                         f"{v['ci95'][1]:.2f}] | {v['verdict']} |")
    if results.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {e}" for e in results["errors"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print what the check runs and exit (no GPU needed)")
    ap.add_argument("--output-dir", default="output/device_check")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds per comparison")
    ap.add_argument("--skip-timings", action="store_true", help="run the CUDA tests only")
    args = ap.parse_args(argv)
    if args.list:
        print("CUDA tests (pytest -m cuda tests/tools/test_cuda.py):")
        for t in _cuda_tests():
            print(f"  {t}")
        print(f"timings ({args.repeats} alternating rounds each, fp32 and AMP where it applies):")
        for key, what in TIMINGS:
            print(f"  {key}: {what}")
        print("estimated: tests ~3 min, timings ~3 min on one H100/H200-class GPU (under 8 min in all)")
        return 0
    if not torch.cuda.is_available():
        print("device check: no CUDA device visible (torch.cuda.is_available() is False); run it on a GPU machine",
              file=sys.stderr)
        return 2
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {"device": device_info(), "errors": []}
    print(f"[device check] {results['device']}", flush=True)
    results["tests"] = run_cuda_tests(out)
    print(f"[device check] CUDA tests: {results['tests']['summary']}", flush=True)
    if not args.skip_timings:
        results["timings"] = {}
        for name, fn in (("detector", _detector_timings), ("backbone", _backbone_timings)):
            try:
                results["timings"].update(fn(args.repeats))
            except Exception as err:  # a failed timing is reported and fails the check; the others still run
                results["errors"].append(f"{name} timings: {type(err).__name__}: {err}")
            print(f"[device check] {name} timings done", flush=True)
    (out / "device_check.json").write_text(strict_json(results, default=str))
    (out / "device_check.md").write_text(markdown(results))
    print(markdown(results))
    print(f"[device check] wrote {out / 'device_check.json'} and {out / 'device_check.md'}")
    return 0 if results["tests"]["ok"] and not results["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
