"""Imported by every tool before the project's packages: hides the two third-party warnings every run printed
(classification.engine.cli.hide_third_party_warnings: fvcore's torch.jit.script FutureWarning, Detectron2's
torch.meshgrid UserWarning). Nothing else is filtered."""

from classification.engine.cli import hide_third_party_warnings

hide_third_party_warnings()
