"""The report's figures as a person reads them at 100 %: panel labels in a real font on filled strips that never
overlap, legends beside the data, one learning-rate line per schedule, error bars only where an interval exists,
and table headers that break between words."""

from PIL import Image, ImageDraw

from detection.report.document import STYLE, html_table
from detection.report.groups import group_runs
from detection.report.panel import _label_box, panel_font
from detection.report.plots import _flops_plot, _training_plot
from detection.report.runs import load_run
from fabricated_runs import COCO_R101, COCO_VGG, make_run


def test_panel_labels_are_placed_apart_inside_the_cell_in_a_truetype_font():
    font = panel_font()
    assert font.getbbox("sneaker 0.95")[3] >= 10  # a real font: PIL's default bitmap one was ~8 px high
    draw = ImageDraw.Draw(Image.new("RGB", (240, 240)))
    placed = []
    for box in [(10, 40, 120, 100)] * 3 + [(12, 42, 118, 98), (200, 0, 239, 30)]:  # the same object 4x, one at a corner
        rect, _ = _label_box(draw, "tshirt_top 0.86", box, placed, (240, 240), font)
        assert 0 <= rect[0] and rect[2] <= 240 and 0 <= rect[1] and rect[3] <= 240, rect
        assert not any(rect[0] < o[2] and o[0] < rect[2] and rect[1] < o[3] and o[1] < rect[3] for o in placed), rect
        placed.append(rect)


def _captured():
    figs = []
    return figs, lambda fig, name, caption: figs.append((fig, name, caption))


def test_runs_of_one_schedule_share_one_learning_rate_line_that_names_them(tmp_path):
    runs = [load_run(make_run(tmp_path, name, "vgg16", coco=COCO_VGG)) for name in ("a", "b", "c")]
    figs, save = _captured()
    _training_plot(runs, save)
    (fig, name, caption), = figs
    loss, lr = fig.axes
    assert len(loss.get_lines()) == 3 and len({(ln.get_color(), ln.get_linestyle()) for ln in loss.get_lines()}) == 3
    assert [ln.get_label() for ln in lr.get_lines()] == ["every run"]  # one schedule: one line, not three stacked
    assert loss.get_legend() is not None and lr.get_legend() is not None
    for ax in (loss, lr):  # legends below the axes, outside the data
        assert ax.get_legend().get_window_extent().y1 < ax.get_window_extent().y0


def test_ap_vs_gmacs_draws_error_bars_only_where_a_group_has_an_interval_and_says_so(tmp_path):
    runs = [load_run(make_run(tmp_path, f"r101_s{s}", "resnet101", coco={**COCO_R101, "AP": 27.0 + s}, seed=s))
            for s in (0, 1)] + [load_run(make_run(tmp_path, "vgg", "vgg16", coco=COCO_VGG))]
    for r in runs:
        r.gmacs = 7.6 if r.backbone == "resnet101" else 15.5
    figs, save = _captured()
    _flops_plot(group_runs(runs), save)
    (_, _, caption), = figs
    assert caption == ("AP vs backbone mult-adds (error bars: 95% interval over the group's units; none for vgg "
                       "(no interval))")
    figs, save = _captured()
    _flops_plot(group_runs(runs[2:]), save)
    assert figs[0][2] == "AP vs backbone mult-adds (no error bars: no group has an interval)"


def test_table_headers_break_only_between_words_and_after_the_underscores_of_a_name():
    table = html_table(["config key", "vgg16_bn_gn_scratch"], [["MODEL.WEIGHTS", "/a/b"]], wrap=True)
    assert "<th>vgg16_<wbr/>bn_<wbr/>gn_<wbr/>scratch</th>" in table
    assert "th{overflow-wrap:anywhere}" not in STYLE  # "vgg16_bn_gn_scrat / ch" was drawn
