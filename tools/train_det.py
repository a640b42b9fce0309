#!/usr/bin/env python3
"""Train / evaluate Faster R-CNN with a backbone from `backbones` (Detectron2 train_net.py interface).

    tools/train_det.py --config-file configs/COCO-Detection/faster_rcnn_R_101_C4.yaml --num-gpus 8
    tools/train_det.py --config-file configs/PascalVOC-Detection/faster_rcnn_vgg16.yaml --slurm --nodes 2 \\
        --partition learnfair --timeout 4320
    tools/train_det.py --config-file configs/COCO-Detection/faster_rcnn_vgg16.yaml \\
        --config-file configs/Embedded-Detection/smoke.yaml MODEL.BACKBONES.NAME vgg16_bn   # CPU smoke run
    tools/train_det.py --default-benchmark        # the README's main job: VGG-16 vs ResNet-101, embedded data

Without GPUs, --num-gpus N runs N CPU processes (gloo). --resume continues from OUTPUT_DIR/last_checkpoint.
"""

import sys

if __name__ == "__main__":
    if "--default-benchmark" in sys.argv[1:]:
        from detection.engine.benchmark_job import main as benchmark_main

        sys.exit(benchmark_main([a for a in sys.argv[1:] if a != "--default-benchmark"]))
    from detection.engine.train_net import run

    run()
