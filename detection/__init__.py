"""Detectron2 plugin: `import detection` makes Detectron2 importable without its compiled ops and registers
the project's backbones (ResNet / plain / VGG from `backbones`) in Detectron2's registries."""

from . import compat

compat.install()  # before any detectron2 submodule import; see detection/compat.py
