#!/usr/bin/env python3
"""Train / evaluate Faster R-CNN with a backbone from `backbones` (Detectron2 train_net.py interface).

    tools/train_det.py --config-file configs/COCO-Detection/faster_rcnn_R_101_C4.yaml --num-gpus 8
    tools/train_det.py --config-file configs/PascalVOC-Detection/faster_rcnn_vgg16.yaml --slurm --nodes 2 \\
        --partition learnfair --timeout 4320
    tools/train_det.py --config-file configs/COCO-Detection/faster_rcnn_vgg16.yaml \\
        --config-file configs/Embedded-Detection/smoke.yaml MODEL.BACKBONES.NAME vgg16_bn   # CPU smoke run

Without GPUs, --num-gpus N runs N CPU processes (gloo). --resume continues from OUTPUT_DIR/last_checkpoint.
The README's main job (pretrain -> transfer -> report) is tools/main_job.py.
"""

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from detection.engine.train_net import run

if __name__ == "__main__":
    run()
