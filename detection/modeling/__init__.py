"""Detectron2 registrations: the BackbonesRCNN meta-architecture (one `backbones` model for trunk and head), the
backbones (C4 trunk, VGG trunk, FPN), the C4 res5 RoI head, the VGG fc6/fc7 RoI head and the RPN with
py-faster-rcnn's anchor labelling as an option."""

from .backbone import BackbonesTrunk, build_backbones_fpn_backbone, build_backbones_model, build_backbones_trunk
from .meta_arch import BackbonesRCNN
from .roi_heads import BackbonesRes5ROIHeads, BackbonesVGGROIHeads, VGGFC67Head
from .rpn import BackbonesRPN

__all__ = ["BackbonesRCNN", "BackbonesTrunk", "build_backbones_trunk", "build_backbones_fpn_backbone",
           "build_backbones_model", "BackbonesRes5ROIHeads", "BackbonesVGGROIHeads", "VGGFC67Head", "BackbonesRPN"]
