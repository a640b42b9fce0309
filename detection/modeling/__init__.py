"""Detectron2 registrations: backbones (C4 trunk, VGG trunk, FPN), the C4 res5 RoI head, the VGG fc6/fc7 box head."""

from .backbone import BackbonesTrunk, build_backbones_fpn_backbone, build_backbones_model, build_backbones_trunk
from .roi_heads import BackbonesRes5ROIHeads, VGGFC67Head

__all__ = ["BackbonesTrunk", "build_backbones_trunk", "build_backbones_fpn_backbone", "build_backbones_model",
           "BackbonesRes5ROIHeads", "VGGFC67Head"]
