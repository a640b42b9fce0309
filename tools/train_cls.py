#!/usr/bin/env python3
"""Pretrain a `backbones` model for classification (the paper's ImageNet recipe, or its CIFAR one).

    tools/train_cls.py --model resnet101 --dataset imagefolder --data-root /data/imagenet --num-gpus 8 \\
        --batch-size 32 --iterations 600000 --test-mode ten-crop --slurm --nodes 4 --partition learnfair
    tools/train_cls.py --model cifar_resnet110 --dataset cifar10 --data-root cifar-10-batches-py \\
        --iterations 64000 --warmup-until-error 0.8
    tools/train_cls.py --model resnet101 --dataset embedded --image-size 64 --iterations 300   # CPU smoke

The final checkpoint (OUTPUT_DIR/model_final.pth, with its pixel statistics and architecture) is accepted as
MODEL.WEIGHTS by every detection config of the same architecture.
"""

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from classification.engine.train_net import run

if __name__ == "__main__":
    run()
