"""The report's glossary: one line for each term it uses -- every column of its tables and the words of its
sentences -- listed at the end of a report for the terms that report contains."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .document import Section

__all__ = ["GLOSSARY", "glossary_section", "terms_used"]

GLOSSARY: dict[str, str] = {
    # the results table (Detectron2 MODEL_ZOO's columns and ours)
    "name": "a group: the runs of one configuration (backbone, arm, data, schedule) that differ only in their seeds",
    "backbone": "the network the detector's features come from (backbones/: ResNet, plain, VGG), at its width",
    "init": "how the backbone started: pretrained (from a classification run or weights file) or scratch (random)",
    "n": "the group's runs: pretraining runs x detection runs per pretraining run where they differ",
    "iterations": "the detector's training schedule in SGD iterations (MODEL_ZOO's 'lr sched')",
    "train s/iter": "seconds per training iteration, logged by Detectron2, on the device and threads named",
    "inference s/im": "seconds per image of the model's forward pass in eval mode at batch 1, data loading excluded",
    "train mem (MB)": "peak memory of training (the measure is named under the table)",
    "params (M)": "the detector's parameters, in millions",
    "GMACs (224²)": "multiply-adds of the backbone on one 224x224 image with its 1000-way classifier (the paper's "
                    "Table 1 counting), in billions",
    "top-1 err %": "the pretraining run's error on its held-out val items: mean [95% interval over pretraining runs]",
    "AP": "COCO box AP: precision averaged over IoU thresholds 0.50:0.05:0.95, recall levels and categories (x100)",
    "AP50": "box AP at IoU 0.5 (PASCAL VOC's criterion)",
    "AP75": "box AP at IoU 0.75 (a stricter localisation)",
    "APs": "AP on small objects (area < 32² pixels)",
    "APm": "AP on medium objects (32² to 96² pixels)",
    "APl": "AP on large objects (area > 96² pixels)",
    "mAP50_voc07": "PASCAL VOC 2007's mAP at IoU 0.5 with its 11-point interpolation",
    "mAP50_area": "VOC mAP at IoU 0.5, area under the full precision-recall curve (VOC 2010 onwards)",
    "paper AP50 / AP": "He et al.'s Table 7/8 numbers, shown only beside runs of the paper's own design",
    "chance (random boxes)": "AP of 100 random boxes per image on the same test set: the floor any detector must beat",
    "measured on": "the device and threads the timings were taken on",
    # the leaderboard, the pretraining and runs tables, what differs
    "family": "the backbone's architecture family: resnet (residual), plain (the same net without shortcuts), vgg",
    "depth": "the backbone's number of weighted layers (ResNet-101: 101)",
    "weights": "where the backbone's pretrained weights came from: pretrained here, or the file given",
    "top-1 from": "where a top-1 error comes from: measured here on the val items, or published with the weights",
    "dataset": "the classification data the backbone was pretrained on",
    "image size": "the pretraining's input resolution in pixels",
    "batch": "images per SGD step of the pretraining",
    "lr": "the pretraining's base learning rate",
    "images seen": "training images the pretraining ran through (iterations x batch)",
    "val top-1 err %": "the pretrained classifier's error on its val items (its best guess is wrong)",
    "val top-5 err %": "the pretrained classifier's error when the right class is not among its five best guesses",
    "val images": "how many val items the pretraining's errors are measured on",
    "seconds": "the pretraining run's wall-clock time",
    "config key": "a Detectron2 config key whose value differs between the configurations (one column each)",
    "run": "one training run: an OUTPUT_DIR of tools/train_det.py",
    "status": "whether the run finished, failed (and where) or is incomplete, read from its files",
    "directory": "where the run's files are",
    # the comparisons table and the sentences
    "A": "the first group of a comparison (Δ is A minus B)",
    "B": "the second group of a comparison",
    "metric": "what a comparison is decided on, declared before the job ran: AP (COCO's AP@[.5:.95]) for COCO-style "
              "detection, AP50 for VOC, training error for the degradation nets",
    "test-set SE": "the SE of the part of Δ's movement over redrawn test images that every unit of a side shares: "
                   "inside the interval (each unit's own luck on these images is in the units' spread already)",
    # the degradation experiment's table
    "net": "a CIFAR network of the paper's Sec. 4.2 (6n+2 layers)",
    "blocks": "residual (with shortcuts) or plain (the same layers without them)",
    "seeds": "training runs of the net, each from its own seed",
    "training error %": "the net's final error on its training items (the paper's Figs. 1 and 6)",
    "val error %": "the net's final error on held-out items",
    "Δ (A − B)": "the difference of the two groups' means (the mean of each group's unit means)",
    "unit": "what varies independently in a group: a pretraining run (its detection runs nested under it) for a "
            "pretrained group, a run for a group trained from scratch",
    "95% CI": "the 95% confidence interval of the difference: Welch's t over the two groups' unit means, with the "
              "test set's part inside (the movement over redrawn test images every unit of a side shares)",
    "family-adjusted CI (level)": "the interval at the comparison's Holm step: it excludes 0 exactly when the "
                                  "comparison is called",
    "Holm": "Holm's step-down method: adjusts every comparison a job prints together, so that the chance of any "
            "false call stays at 0.05",
    "Welch": "Welch's t interval: two groups of unequal spread, with Welch-Satterthwaite degrees of freedom (df)",
    "P(A > B)": "the chance that a unit of A scores higher than a unit of B (ties half): a description, not a test",
    "units (df)": "the units each side rests on, and the interval's degrees of freedom",
    "call": "'A ahead' when the family-adjusted interval excludes 0; otherwise no call",
    "MDE": "minimum detectable effect: the smallest true difference the comparison would call with 80% power at its "
           "Holm level, found by simulating its Welch test 20,000 times with each group's sd drawn from what its "
           "unit means allow (the power averaged over the sds' uncertainty); a 'no call' says nothing about "
           "differences below it",
    "positive control": "the same backbone with a fraction of its pretraining against the whole: a known difference "
                        "that says how to read the job's no-calls (seen: 'no difference this job could see'; not "
                        "seen: the job is underpowered; the wrong way round: a failed assay); Holm alone decides "
                        "every call",
    "arm": "how a backbone is trained and normalised for detection (e.g. frozenbn_pretrained, gn_scratch)",
    "frozenbn": "BatchNorm with its statistics and affine frozen after pretraining (the paper's detection setting)",
    "gn": "GroupNorm, trained in the detector (needed to train from scratch: Rethinking ImageNet Pre-training)",
    "width": "the fraction of the paper's channel counts every layer has (0.25 on the embedded miniature)",
}


def _words(section: Section) -> Iterable[str]:
    yield section.title
    yield from section.intro
    yield from section.lines
    for t in section.tables:
        yield from map(str, t.head)
        yield from (str(c) for row in t.rows for c in row)
    yield from (cap for _, cap in section.figures)


HEADERS_ONLY = frozenset({"name", "n"})  # words too common in prose to be looked for there


def terms_used(sections: Iterable[Section]) -> list[str]:
    """The glossary's terms that the sections contain, in the glossary's order: as a column header, or as a word
    of the text (inside a run name too: "gn" in "resnet101_gn_scratch")."""
    text = "\n".join(w for s in sections for w in _words(s))
    heads = {str(h) for s in sections for t in s.tables for h in t.head}
    return [term for term in GLOSSARY if term in heads or term not in HEADERS_ONLY and re.search(
        rf"(?<![A-Za-z0-9]){re.escape(term)}(?![A-Za-z0-9])", text)]


def glossary_section(sections: Iterable[Section]) -> Section:
    """The glossary of the terms the report's sections use."""
    sections = list(sections)
    return Section("Glossary", lines=tuple(f"{term}: {GLOSSARY[term]}." for term in terms_used(sections)),
                   bullets=True)
