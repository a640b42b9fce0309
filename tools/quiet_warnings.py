"""Imported by every tool before the project's packages: hides the one third-party warning that each run printed
twice -- `torch.jit.script` is deprecated (a FutureWarning from fvcore's focal_loss module, imported by Detectron2).
Nothing else is filtered; the project's own code does not script anything."""

from classification.engine.cli import hide_fvcore_jit_warning

hide_fvcore_jit_warning()
