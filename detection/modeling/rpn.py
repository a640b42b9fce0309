"""Detectron2's RPN with py-faster-rcnn's anchor labelling as an option (MODEL.RPN.MATCH_INSIDE_ONLY).

The two differ for anchors that cross the image border (with MODEL.RPN.BOUNDARY_THRESH >= 0):
- Detectron2 matches ground truth against *all* anchors, then ignores the outside ones. A ground truth whose best
  anchor crosses the border thereby loses the positive the matcher guaranteed it (allow_low_quality_matches).
- py-faster-rcnn (lib/rpn/anchor_target_layer.py) removes outside anchors first
  (`anchors = all_anchors[inds_inside, :]`) and matches among the rest, so every ground truth keeps its best
  *inside* anchor as a positive.
With the flag off, or with BOUNDARY_THRESH < 0 (no anchor is outside), this is Detectron2's RPN unchanged.
"""

from __future__ import annotations

import torch
from detectron2.config import configurable
from detectron2.modeling.proposal_generator import PROPOSAL_GENERATOR_REGISTRY, RPN
from detectron2.structures import Boxes, pairwise_iou

__all__ = ["BackbonesRPN"]


@PROPOSAL_GENERATOR_REGISTRY.register()
class BackbonesRPN(RPN):
    @configurable
    def __init__(self, *, match_inside_only: bool = False, **kwargs):
        """match_inside_only: label anchors as py-faster-rcnn does (match among the anchors inside the image)."""
        super().__init__(**kwargs)
        self.match_inside_only = match_inside_only

    @classmethod
    def from_config(cls, cfg, input_shape):
        ret = super().from_config(cfg, input_shape)
        ret["match_inside_only"] = cfg.MODEL.RPN.MATCH_INSIDE_ONLY
        return ret

    @torch.jit.unused
    @torch.no_grad()
    def label_and_sample_anchors(self, anchors: list[Boxes], gt_instances):
        if not self.match_inside_only or self.anchor_boundary_thresh < 0:
            return super().label_and_sample_anchors(anchors, gt_instances)
        anchors = Boxes.cat(anchors)
        gt_labels, matched_gt_boxes = [], []
        for instances in gt_instances:
            gt_boxes = instances.gt_boxes
            inside = anchors.inside_box(instances.image_size, self.anchor_boundary_thresh)
            labels = torch.full((len(anchors),), -1, dtype=torch.int8, device=gt_boxes.device)  # outside: ignored
            matched_idxs = torch.zeros(len(anchors), dtype=torch.int64, device=gt_boxes.device)
            if inside.any():
                inside_idxs, inside_labels = self.anchor_matcher(pairwise_iou(gt_boxes, anchors[inside]))
                labels[inside] = inside_labels.to(labels.dtype)
                matched_idxs[inside] = inside_idxs
            labels = self._subsample_labels(labels)
            gt_labels.append(labels)
            matched_gt_boxes.append(torch.zeros_like(anchors.tensor) if len(gt_boxes) == 0
                                    else gt_boxes[matched_idxs].tensor)
        return gt_labels, matched_gt_boxes
