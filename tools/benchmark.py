#!/usr/bin/env python3
"""Performance, measured side by side in one run and reported as ratios (absolute times on shared machines are
noise). Writes a table to stdout, JSON to --json, and with --markdown the BENCHMARKS.md section.

    python tools/benchmark.py                    # everything, ~15 minutes on 2 CPU cores
    python tools/benchmark.py --only backbone cocoeval --repeats 5

Sections: backbone (ours vs torchvision, train and inference; inference variants), detector (our R-101-C4 plugin
vs Detectron2's built-in R-101-C4, same config, shorter side 600), cocoeval (faster-coco-eval vs pycocotools on
5,000 synthetic images), peak (achieved GFLOP/s of the backbone vs a large matmul), loader (detection train
loader throughput vs the training step's consumption), memory (peak RSS of an R-101-C4 training iteration).
Measurements alternate between the two sides (ABAB...) and report medians.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import detection  # noqa: F401  (before any detectron2 submodule: the _C shim)

REPO = Path(__file__).resolve().parent.parent


def _median_times(fns: dict, repeats: int, warmup: int = 1) -> dict[str, float]:
    """Run each fn `warmup` times, then `repeats` rounds alternating between them; median seconds per call."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _bench_backbone_one(name: str, opts: dict, repeats: int) -> dict:
    import torchvision

    import backbones

    x = torch.randn(8, 3, 224, 224)
    torch.manual_seed(0)
    ours, tv = backbones.create_model(name, **opts), getattr(torchvision.models, name)(weights=None)
    tv_path = REPO / "output" / "benchmark" / f"{name}_tv.pth"
    tv_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tv.state_dict(), tv_path)
    backbones.load_pretrained(ours, tv_path)

    def train_step(m):
        m.train()
        m.zero_grad(set_to_none=True)
        m(x).sum().backward()

    t = _median_times({"ours": lambda: train_step(ours), "torchvision": lambda: train_step(tv)}, repeats)
    row = {"train_img_s_ours": 8 / t["ours"], "train_img_s_torchvision": 8 / t["torchvision"],
           "train_ratio": t["torchvision"] / t["ours"]}
    ours.eval()
    tv.eval()
    # channels_last is an explicit choice (model.to(memory_format=...)): compare it with the default NCHW layout,
    # each checked against torchvision's output.
    cl = backbones.create_model(name, **opts).eval()
    cl.load_state_dict(ours.state_dict())
    cl = cl.to(memory_format=torch.channels_last)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    variants = {"ours": lambda: ours(x), "torchvision": lambda: tv(x), "ours_channels_last": lambda: cl(x_cl)}
    with torch.inference_mode():
        ref = tv(x)
        torch.testing.assert_close(ours(x), ref, atol=1e-3, rtol=1e-3)  # every variant must stay correct
        torch.testing.assert_close(cl(x_cl), ref, atol=1e-3, rtol=1e-3)
        t = _median_times(variants, repeats)
    row.update({f"infer_img_s_{k}": 8 / v for k, v in t.items()})
    row["infer_ratio"] = t["torchvision"] / t["ours"]
    row["infer_channels_last_vs_nchw"] = t["ours"] / t["ours_channels_last"]
    return row


def bench_backbone(repeats: int) -> dict:
    out = {}
    for name, opts in (("resnet50", {"stride_in_1x1": False}), ("resnet101", {"stride_in_1x1": False}),
                       ("vgg16", {})):
        out[name] = _bench_backbone_one(name, opts, repeats)
        gc.collect()
    return out


def _gflops(name: str, repeats: int) -> float:
    import backbones

    model = backbones.create_model(name).eval()
    macs = backbones.complexity(model).macs
    x = torch.randn(8, 3, 224, 224)
    with torch.inference_mode():
        tf = _median_times({"f": lambda: model(x)}, repeats)["f"]
    return 2 * macs * 8 / tf / 1e9


def bench_peak(repeats: int) -> dict:
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    t = _median_times({"mm": lambda: a @ b}, repeats)["mm"]
    peak = 2 * 4096**3 / t / 1e9
    res = {"matmul_gflops": peak}
    for name in ("resnet101", "resnet50"):
        res[f"{name}_inference_gflops"] = g = _gflops(name, repeats)
        res[f"{name}_fraction_of_peak"] = g / peak
    return res


def _det_cfgs():
    from detectron2 import model_zoo
    from detectron2.config import get_cfg

    from detection import get_detection_cfg

    ours = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                             ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NORM", "FrozenBN"])
    d2 = get_cfg()
    d2.merge_from_file(model_zoo.get_config_file("COCO-Detection/faster_rcnn_R_101_C4_3x.yaml"))
    d2.MODEL.WEIGHTS, d2.MODEL.DEVICE = "", "cpu"
    # the same detector settings as ours: paper anchors, RoI pooling, RoI batch, proposals, input size
    d2.MODEL.ANCHOR_GENERATOR.SIZES = [list(ours.MODEL.ANCHOR_GENERATOR.SIZES[0])]
    d2.MODEL.ROI_BOX_HEAD.POOLER_TYPE = ours.MODEL.ROI_BOX_HEAD.POOLER_TYPE
    d2.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = ours.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    for k in ("PRE_NMS_TOPK_TRAIN", "POST_NMS_TOPK_TRAIN", "PRE_NMS_TOPK_TEST", "POST_NMS_TOPK_TEST"):
        setattr(d2.MODEL.RPN, k, getattr(ours.MODEL.RPN, k))
    return ours, d2


def _calibrated(model):
    """Give FrozenBN pretrained-like statistics so a random deep net does not overflow (as a real checkpoint)."""
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if "norm" in name and name.endswith("weight"):
                buf.fill_(0.2)
    return model


def _det_inputs():
    from detectron2.structures import Boxes, Instances

    g = torch.Generator().manual_seed(0)
    img = (torch.rand(3, 600, 800, generator=g) * 255)
    inst = Instances((600, 800), gt_boxes=Boxes(torch.tensor([[50.0, 60.0, 300.0, 400.0], [400, 100, 700, 500]])),
                     gt_classes=torch.tensor([1, 5]))
    return [{"image": img, "instances": inst, "height": 600, "width": 800}]


def bench_detector(repeats: int) -> dict:
    from detectron2.modeling import build_model
    from detectron2.utils.events import EventStorage

    ours_cfg, d2_cfg = _det_cfgs()
    torch.manual_seed(0)
    models = {"ours": _calibrated(build_model(ours_cfg)), "detectron2": _calibrated(build_model(d2_cfg))}
    models["ours"].load_state_dict(models["detectron2"].state_dict())  # same names, same weights
    batch = _det_inputs()
    opts = {k: torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-4) for k, m in models.items()}

    def step(k):
        m = models[k].train()
        with EventStorage(0):
            loss = sum(m(batch).values())
        opts[k].zero_grad()
        loss.backward()
        opts[k].step()

    t = _median_times({k: (lambda k=k: step(k)) for k in models}, repeats)
    res = {"train_s_per_iter_ours": t["ours"], "train_s_per_iter_detectron2": t["detectron2"],
           "train_ratio": t["detectron2"] / t["ours"]}
    infer = [{k: v for k, v in batch[0].items() if k != "instances"}]
    for m in models.values():
        m.eval()
    with torch.inference_mode():
        t = _median_times({k: (lambda k=k: models[k](infer)) for k in models}, repeats)
    res.update({"infer_s_per_img_ours": t["ours"], "infer_s_per_img_detectron2": t["detectron2"],
                "infer_ratio": t["detectron2"] / t["ours"]})
    return res


def bench_cocoeval(repeats: int) -> dict:
    from pycocotools.coco import COCO

    from detection.evaluation import evaluate_coco

    rng = np.random.default_rng(0)
    images, anns, dets = [], [], []
    for i in range(1, 5001):
        images.append({"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"})
        for _ in range(rng.integers(1, 8)):
            x, y, w, h = rng.uniform(0, 500), rng.uniform(0, 380), rng.uniform(10, 140), rng.uniform(10, 100)
            c = int(rng.integers(1, 11))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": c, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": 0})
            for _ in range(3):
                dets.append({"image_id": i, "category_id": c if rng.uniform() < 0.7 else int(rng.integers(1, 11)),
                             "bbox": [x + rng.normal(0, 8), y + rng.normal(0, 8), w * rng.uniform(0.7, 1.3),
                                      h * rng.uniform(0.7, 1.3)], "score": float(rng.uniform())})
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {"images": images, "annotations": anns,
                        "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 11)]}
        coco.createIndex()
    results = {}
    t = _median_times({b: (lambda b=b: results.__setitem__(b, evaluate_coco(coco, dets, backend=b)))
                       for b in ("faster_coco_eval", "pycocotools")}, repeats, warmup=0)
    same = all(abs(results["faster_coco_eval"].stats[k] - results["pycocotools"].stats[k]) < 1e-9
               for k in results["pycocotools"].stats)
    return {"images": 5000, "detections": len(dets), "seconds_faster_coco_eval": t["faster_coco_eval"],
            "seconds_pycocotools": t["pycocotools"], "speedup": t["pycocotools"] / t["faster_coco_eval"],
            "identical_stats": same, "AP": results["pycocotools"].stats["AP"]}


def bench_loader(repeats: int) -> dict:
    """Images/s the train loader delivers (mapper + augmentation, 2 workers) vs images/s the C4 step consumes."""
    from detectron2.modeling import build_model
    from detectron2.utils.events import EventStorage

    from detection import get_detection_cfg
    from detection.datasets import ensure_embedded_dataset
    from detection.engine.data import build_train_loader

    ensure_embedded_dataset()
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                             "configs/Embedded-Detection/smoke.yaml"],
                            ["MODEL.DEVICE", "cpu", "DATALOADER.NUM_WORKERS", "2", "SOLVER.IMS_PER_BATCH", "2",
                             "INPUT.MIN_SIZE_TRAIN", "(600,)", "INPUT.MAX_SIZE_TRAIN", "1000"])
    loader, _ = build_train_loader(cfg)
    it = iter(loader)
    next(it)
    n_batches = 20
    t0 = time.perf_counter()
    for _ in range(n_batches):
        next(it)
    loader_rate = n_batches * 2 / (time.perf_counter() - t0)
    del it
    paper_cfg, _ = _det_cfgs()  # the consumer: the paper's R-101-C4 step on 2 images at shorter side 600
    model = _calibrated(build_model(paper_cfg)).train()
    batch = _det_inputs() * 2
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step():
        with EventStorage(0):
            loss = sum(model(batch).values())
        opt.zero_grad()
        loss.backward()
        opt.step()

    t = _median_times({"step": step}, max(2, repeats // 2))["step"]
    step_rate = 2 / t
    return {"loader_img_s": loader_rate, "train_step_img_s": step_rate, "ratio": loader_rate / step_rate}


def bench_memory() -> dict:
    code = (
        "import torch, detection, resource\n"
        "from detectron2.modeling import build_model\n"
        "from detectron2.utils.events import EventStorage\n"
        "sys_path = __import__('sys').path.insert(0, 'tools')\n"
        "import benchmark as b\n"
        "cfg, _ = b._det_cfgs()\n"
        "m = b._calibrated(build_model(cfg)).train()\n"
        "with EventStorage(0):\n"
        "    loss = sum(m(b._det_inputs()).values())\n"
        "loss.backward()\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(int(hwm) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    return {"peak_rss_mib_r101_c4_train_iter_600px": int(out.stdout.strip().splitlines()[-1])}


SECTIONS = {"backbone": bench_backbone, "peak": bench_peak, "detector": bench_detector,
            "cocoeval": bench_cocoeval, "loader": bench_loader, "memory": lambda repeats: bench_memory()}


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="output/benchmark/benchmark.json")
    ap.add_argument("--markdown", default=None, help="write the figures as markdown to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    results = json.loads(Path(args.json).read_text()) if Path(args.json).is_file() else {}  # sections not rerun
    results["machine"] = {"cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                          "date": time.strftime("%Y-%m-%d")}
    for name in args.only:
        t0 = time.time()
        print(f"[benchmark] {name} ...", flush=True)
        results[name] = SECTIONS[name](args.repeats)
        results[name]["section_seconds"] = round(time.time() - t0, 1)
        for k, v in results[name].items():
            if isinstance(v, dict):
                print(f"  {k}: " + ", ".join(f"{kk}={_fmt(vv)}" for kk, vv in v.items()))
            else:
                print(f"  {k}: {_fmt(v)}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    if args.markdown:
        lines = [f"Command: `python tools/benchmark.py --repeats {args.repeats}` ({results['machine']})", ""]
        for name in [n for n in SECTIONS if n in results]:
            lines.append(f"### {name}")
            for k, v in results[name].items():
                lines.append(f"- {k}: " + (", ".join(f"{kk} {_fmt(vv)}" for kk, vv in v.items())
                                           if isinstance(v, dict) else _fmt(v)))
            lines.append("")
        Path(args.markdown).write_text("\n".join(lines))
    print(f"[benchmark] wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
