"""ImageNet-style pretraining of `backbones` models (paper Sec. 3.4 / 4.2) and the paper's analyses.

    classification.engine  the training loop, its config and command line, and the engine pieces detection
                           shares (multi-process launch, Slurm submission, CLI error handling)
    classification.data    datasets (ImageNet folders, CIFAR-10, Fashion-MNIST, the embedded objects), the one
                           image reader, augmentation, resumable seeded sampling
    classification.analysis  degradation curves (Figs. 1, 6) and layer responses (Fig. 7)
Checkpoints are `backbones.save_pretrained` files: detection configs take them as MODEL.WEIGHTS directly.
"""
