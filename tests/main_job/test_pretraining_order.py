"""detection.main_job.pretraining_order: each backbone's pretraining top-1 error against the first's is called
before any transfer comparison, and a call that ranks the pair opposite to ImageNet is said right after it."""

from detection.main_job.family import MEASURED, PUBLISHED, measured_top1, published_top1
from detection.main_job.headline import headline_lines
from detection.main_job.pretraining_order import imagenet_order, imagenet_order_text, pretraining_order
from detection.main_job.results import JobResults
from detection.main_job.results_doc import render_headline
from detection.report.comparison import compare

VGG = {"vgg16_bn_p0": 25.0, "vgg16_bn_p1": 25.4, "vgg16_bn_p2": 24.8, "vgg16_bn_p3": 25.6, "vgg16_bn_p4": 25.2}
RESNET = {"resnet101_p0": 27.5, "resnet101_p1": 28.0, "resnet101_p2": 27.2, "resnet101_p3": 28.3, "resnet101_p4": 27.9}


def test_the_miniature_calling_vgg_the_better_classifier_is_said_to_reverse_imagenet():
    top1 = {"vgg16_bn": measured_top1(VGG), "resnet101": measured_top1(RESNET)}
    (c,) = pretraining_order(("vgg16_bn", "resnet101"), top1)
    assert (c.a, c.b, c.higher_is_better) == ("resnet101", "vgg16_bn", False) and c.call == "vgg16_bn"
    assert imagenet_order(c) is False  # ImageNet: ResNet-101 21.75% vs VGG-16(BN) 26.64% top-1 error
    text = imagenet_order_text(c)
    assert text.startswith("On ImageNet the order is the reverse (resnet101 21.75% vs vgg16_bn 26.64% top-1 error")
    assert "cannot show the paper's direction" in text


def test_a_miniature_that_ranks_as_imagenet_does_says_nothing_more_and_a_no_call_reads_no_order():
    top1 = {"vgg16_bn": measured_top1(RESNET), "resnet101": measured_top1(VGG)}  # ResNet-101 the better one
    (c,) = pretraining_order(("vgg16_bn", "resnet101"), top1)
    assert c.call == "resnet101" and imagenet_order(c) is True and imagenet_order_text(c) is None
    same = {"vgg16_bn": measured_top1(VGG), "resnet101": measured_top1(dict(zip(RESNET, VGG.values())))}
    (c,) = pretraining_order(("vgg16_bn", "resnet101"), same)
    assert c.call is None and imagenet_order(c) is None


def test_only_nets_pretrained_here_and_not_at_chance_are_ordered():
    top1 = {"vgg16_bn": measured_top1(VGG), "resnet101": published_top1(78.25)}
    assert top1["resnet101"].source == PUBLISHED and top1["vgg16_bn"].source == MEASURED
    assert pretraining_order(("vgg16_bn", "resnet101"), top1) == []
    stuck = {"vgg16_bn": measured_top1(VGG), "resnet101": measured_top1(RESNET, dict.fromkeys(RESNET, 27.0))}
    assert stuck["resnet101"].at_chance and pretraining_order(("vgg16_bn", "resnet101"), stuck) == []
    both = {"vgg16_bn": measured_top1(VGG), "resnet101": measured_top1(RESNET)}
    assert pretraining_order(("vgg16_bn", "resnet101"), both, {frozenset(("vgg16_bn", "resnet101"))}) == []


def test_the_job_and_the_readme_block_open_with_the_pretraining_call_then_imagenets_order():
    top1 = {"vgg16_bn": measured_top1(VGG), "resnet101": measured_top1(RESNET)}
    res = JobResults(top1=top1, pretraining_order=pretraining_order(("vgg16_bn", "resnet101"), top1))
    res.deltas = [compare("AP", "resnet101_frozenbn_pretrained", {f"p{i}": [48.0 + i] for i in range(5)},
                          "pretraining run", "vgg16_bn_frozenbn_pretrained",
                          {f"p{i}": [57.0 + i] for i in range(5)}, "pretraining run")]
    res.adjust_family()
    assert res.family == "the job's 2 comparisons"  # the pretraining order is one more member of the Holm family
    lines = headline_lines(res)
    assert lines[0].startswith("Pretraining: vgg16_bn has a lower pretraining top-1 error than resnet101, by 2.6 [")
    assert lines[1].startswith("On ImageNet the order is the reverse")
    assert lines[2].startswith("vgg16_bn_frozenbn_pretrained is ahead of resnet101_frozenbn_pretrained by 9.0 AP")
    block = render_headline(res.to_json()).splitlines()
    assert block[:2] == lines[:2] and block[2] == f"**{lines[2].removesuffix('.')}**"
