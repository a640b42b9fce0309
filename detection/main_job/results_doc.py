"""RESULTS.md's result blocks, generated from the results.json files they cite, so that a number or a claim in the
document is a call of the one statistic on the numbers of a finished job (tools/results_doc.py writes and checks
them; a test fails when RESULTS.md disagrees with the files it cites).

A block is
    <!-- results: results/<job>.json -->
    ... generated text ...
    <!-- end results -->
and everything between the markers is replaced by `render(<that file>)`; prose outside the blocks is the authors'.
A `headline` block (<!-- headline: ... --> ... <!-- end headline -->, the README's first result) is
`render_headline`: the job's one backbone comparison as a sentence, its control's, and the groups' table; a
`groups` block is that table alone (a job of one unit a group: rows, no call).
A `contrast` block cites two jobs of one backbone comparison (`render_contrast`): how much its difference changed
from the second job to the first, one contrast of the four groups' units (report.comparison.contrast).
A file is untrusted: every name is escaped as the report's Markdown tables escape cells (HTML, and `|` in a cell),
so no name can shift a row or end a block; an undefined number (null, NaN) is "—"; anything else that is not what
results.json holds -- a key of another type, a mean that is no number or outside [0, 100] -- is one line naming the
file and the key (ResultsDocError)."""

from __future__ import annotations

import html
import math
import re
from dataclasses import fields, replace
from pathlib import Path

from classification.engine.run_files import RunFileError, read_json

from ..report.comparison import Adjustment, Comparison, contrast
from .family import correlation_from_json, correlation_text, leaderboard_from_json, leaderboard_table
from .headline import pretraining_order_lines
from .pool import PoolError, pool_results

__all__ = ["render", "render_headline", "render_groups", "render_demo", "render_contrast", "demo_panel", "regenerate",
           "stale_blocks",
           "comparison_from_json", "ResultsDocError"]

BLOCK = re.compile(r"(?P<open><!-- (?P<kind>results|headline|groups|demo|contrast): (?P<path>\S+(?: \S+)*?) -->\n)"
                   r"(?P<body>.*?)(?P<close><!-- end (?P=kind) -->)", re.S)
KINDS = (("pretraining_order", "pretraining"), ("arms", "arm comparisons"), ("deltas", "backbones"),
         ("plain_vs_residual", "residual vs plain"), ("degradation_comparisons", "degradation: depth"),
         ("interactions", "degradation: depth x shortcuts"), ("layer_response_comparisons", "Fig. 7"))


class ResultsDocError(ValueError):
    """A block that cannot be generated: the message names the document, the block's file and what is wrong."""


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def comparison_from_json(d: dict) -> Comparison:
    """A Comparison as results.json holds it (asdict plus "call" and "mde", which are recomputed, not read)."""
    names = {f.name for f in fields(Comparison)}
    values = {k: _tuple(v) for k, v in d.items() if k in names}
    adj = values.get("adjustment")
    if isinstance(adj, dict):
        adj = {("reading" if k == "gate" else k): _tuple(v) for k, v in adj.items()}  # "gate": written before
        values["adjustment"] = Adjustment(**adj)
    return Comparison(**values)


def _md(text) -> str:
    """Text from the file as Markdown shows it (report.document's rule: HTML escaped), on one line (a line break
    in a name would end a table row or the headline's bold)."""
    return html.escape(" ".join(str(text).splitlines()), quote=False)


def _row(cells) -> str:
    """A Markdown table row, each cell escaped as report.document.markdown_table escapes it."""
    return "| " + " | ".join(_md(c).replace("|", "\\|") for c in cells) + " |"


def _get(d, key: str, kind: type | tuple, where: str, default=None):
    """d[key] of the type results.json gives it (None and absent: `default`); ResultsDocError naming the key."""
    if not isinstance(d, dict):
        raise ResultsDocError(f"{where}: an object, got {type(d).__name__}")
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, kind) or isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ResultsDocError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {v!r:.60}")
    return v


def _number(v, where: str, bounds: tuple[float, float] | None = None) -> float | None:
    """A finite number (None for null / NaN: undefined), within `bounds` when given."""
    if v is None or isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ResultsDocError(f"{where}: expected a finite number, got {v!r:.60}")
    if bounds and not bounds[0] <= v <= bounds[1]:
        raise ResultsDocError(f"{where}: {v:g} is outside [{bounds[0]:g}, {bounds[1]:g}]")
    return float(v)


def _mean_ci(stat, where: str) -> str:
    """mean [95% interval] of a statistic (AP or an error, in percent); "—" where it is undefined."""
    if not stat:
        return "—"
    if not isinstance(stat, dict):
        raise ResultsDocError(f"{where}: a statistic is an object with a 'mean', got {stat!r:.60}")
    mean = _number(stat.get("mean"), f"{where}.mean", (0.0, 100.0))
    if mean is None:
        return "—"
    ci = _get(stat, "interval", list, where)
    if ci is None:
        return f"{mean:.1f}"
    ends = [_number(x, f"{where}.interval") for x in ci]
    if len(ends) != 2 or None in ends:
        raise ResultsDocError(f"{where}.interval: two finite numbers, got {ci!r:.60}")
    return f"{mean:.1f} [{ends[0]:.1f}, {ends[1]:.1f}]"


def render(results: dict, where: str = "results") -> str:
    """The block's markdown: each detection group (mean [95% interval over its units]), pretraining errors, the
    degradation nets, and every comparison of the job's family as the summary prints it, with its call. `where`
    names the file in errors."""
    if not isinstance(results, dict):
        raise ResultsDocError(f"{where}: a results.json is an object, got {type(results).__name__}")
    lines = _control_lines(results, where) + _group_lines(results, where) + _leaderboard_lines(results, where)
    for label, stat in _get(results, "pretraining", dict, where, {}).items():
        units = _get(stat, "units", int, f"{where}.pretraining.{label}", 0)
        lines.append(f"- pretraining {_md(label)}: val top-1 error {_mean_ci(stat, f'{where}.pretraining.{label}')}% "
                     f"over {units} run(s)")
    for label, units in _get(results, "at_chance", dict, where, {}).items():
        n = len(units) if isinstance(units, list) else "?"
        lines.append(f"- pretraining {_md(label)}: never left chance in {n} run(s): in no comparison, not ranked")
    for key, why in _get(results, "not_compared", dict, where, {}).items():
        lines.append(f"- not compared: {_md(key)} ({_md(why)})")
    return "\n".join(lines + _degradation_and_comparison_lines(results, where)).strip() + "\n"


def render_headline(results: dict, where: str = "results") -> str:
    """A headline block: the job's one backbone comparison as the sentence of its call (Comparison.headline), its
    positive control's, and the groups' table; ResultsDocError naming the file for a job with no single backbone
    comparison (a headline is one pair)."""
    if not isinstance(results, dict):
        raise ResultsDocError(f"{where}: a results.json is an object, got {type(results).__name__}")
    deltas = _get(results, "deltas", list, where, [])
    if len(deltas) != 1:
        raise ResultsDocError(f"{where}.deltas: a headline is one backbone comparison, the file has {len(deltas)}")
    lines = _pretraining_order_lines(results, where)
    lines.append(f"**{_headline_text(deltas[0], f'{where}.deltas[0]')}**")
    controls = _controls(results, where)
    for at, c in controls:  # one paragraph, then the table; a pooled part named where there are several
        lines.append(f"Positive control{_part(c) if len(controls) > 1 else ''}: {_headline_text(c, at)}.")
        lines += _chance_caveat(c, at)
    return "\n".join(lines + [""] + _group_lines(results, where)).strip() + "\n"


def render_groups(results: dict, where: str = "results") -> str:
    """A groups block: each detection group's AP50 / AP / AP75 (mean [95% interval over its units]), nothing
    decided -- the README's demo table (one unit a group: rows, no call)."""
    if not isinstance(results, dict):
        raise ResultsDocError(f"{where}: a results.json is an object, got {type(results).__name__}")
    return "\n".join(_group_lines(results, where)).strip() + "\n"


def render_contrast(first: dict, second: dict, where: tuple[str, str] = ("first", "second")) -> str:
    """A contrast block: the one backbone comparison both jobs make (their deltas), the first job's difference minus
    the second's, each side named by its pretraining size, as Comparison.headline; ResultsDocError naming the file
    otherwise."""
    sides = []
    for res, at in zip((first, second), where):
        deltas = _get(res, "deltas", list, at, [])
        if len(deltas) != 1:
            raise ResultsDocError(f"{at}.deltas: a contrast block takes one backbone comparison a job, got "
                                  f"{len(deltas)}")
        d = deltas[0]
        groups = {g.get("name"): g for g in _get(res, "groups", list, at, []) if isinstance(g, dict)}
        try:
            values = tuple(groups[name]["values"][d["metric"]] for name in (d["a"], d["b"]))
            unit = groups[d["a"]]["unit"]
        except (KeyError, TypeError) as err:
            raise ResultsDocError(f"{at}.groups: no per-unit {err} values for {d.get('a')} vs {d.get('b')}") from None
        size = _get(res, "pretrain_image_size", int, at) or 32  # written before the size was recorded: 32
        sides.append(((d["a"], d["b"], d["metric"]), values, unit, size))
    (key, va, unit, sa), (key_b, vb, _, sb) = sides
    if key != key_b:
        raise ResultsDocError(f"{where[1]}: compares {key_b[0]} vs {key_b[1]} on {key_b[2]}, {where[0]} {key[0]} vs "
                              f"{key[1]} on {key[2]}: a contrast is of one comparison")
    a, b, metric = (_md(k) for k in key)
    c = contrast(metric, f"Δ{metric}({a} - {b}) at {sa} px", va, f"at {sb} px", vb, unit)
    if c is None:
        raise ResultsDocError(f"{where[0]}: the groups of {a} vs {b} have no {metric} values")
    return c.headline() + ".\n"


def demo_panel(cited: str) -> str:
    """The panel a demo block shows: the job's report/qualitative.png, committed beside its results file."""
    return re.sub(r"\.json$", "", cited) + "_panel.png"


def render_demo(results: dict, where: str = "results", panel: str = "") -> str:
    """A demo block (the README's `make demo`): its panel, the job's measured time with the machine and day, and
    its groups' table -- every figure of it from the job's own files, so none goes stale alone."""
    if not isinstance(results, dict):
        raise ResultsDocError(f"{where}: a results.json is an object, got {type(results).__name__}")
    minutes = _number(_get(results, "wall_minutes", (int, float), where), f"{where}.wall_minutes", (0.0, 10000.0))
    machine, date = _get(results, "machine", str, where), _get(results, "date", str, where)
    if minutes is None or not machine or not date:
        raise ResultsDocError(f"{where}: a demo block states the job's time: the file has no wall_minutes, machine "
                              "and date (a job written before 2026-12-07, or by --report-only)")
    lines = [f"![make demo: val detections of each detector]({panel})", "",
             f"`make demo` took {minutes:.1f} min (stages, chance level and report; set-up aside) on {_md(machine)}, "
             f"{_md(date)}.", ""]
    return "\n".join(lines + _group_lines(results, where)).strip() + "\n"


def _pretraining_order_lines(results: dict, where: str) -> list[str]:
    """The job's pretraining comparisons (headline.pretraining_order_lines) before its transfer call; none in files
    written before the pretraining order was called."""
    comparisons = []
    for i, d in enumerate(_get(results, "pretraining_order", list, where, [])):
        _comparison_text(d, f"{where}.pretraining_order[{i}]")  # every text of it checked and escaped first
        comparisons.append(_escaped(comparison_from_json(d)))
    return pretraining_order_lines(comparisons)


def _headline_text(d, where: str) -> str:
    """The headline() sentence of a results.json comparison, escaped as _comparison_text escapes."""
    return _comparison_text(d, where, headline=True)


def _controls(results: dict, where: str) -> list[tuple[str, object]]:
    """(where in the file, the comparison) of each pooled part's positive control ("controls") and the job's own
    ("control")."""
    control = _get(results, "control", dict, where)
    return ([(f"{where}.controls[{i}]", c) for i, c in enumerate(_get(results, "controls", list, where, []))]
            + ([(f"{where}.control", control)] if control else []))


def _part(c) -> str:
    """ (the pooled part's label)" of a control, or nothing."""
    return f" ({_md(c['part'])})" if isinstance(c, dict) and c.get("part") else ""


def _chance_caveat(c, where: str) -> list[str]:
    """What a called control shows when its own pretraining never left chance."""
    stuck = _get(c, "pretraining_at_chance", int, where, 0) if isinstance(c, dict) else 0
    if not stuck:
        return []
    return [f"Its pretraining never left chance ({stuck} run(s)): called, it shows only that the job tells a trained "
            "backbone from an untrained one."]


def _control_lines(results: dict, where: str) -> list[str]:
    """The positive control's comparison and how it reads the no-calls, before them."""
    lines = []
    for at, c in _controls(results, where):
        lines.append(f"Positive control{_part(c)}: {_comparison_text(c, at, headline=True)}.")
        lines += _chance_caveat(c, at)
    reading = _get(results, "reading", str, where)
    if reading:
        lines.append(f"Holm's calls below stand; its no-calls read: {_md(reading)}.")
    return lines + [""] if lines else []


def _group_lines(results: dict, where: str) -> list[str]:
    groups = _get(results, "groups", list, where, [])
    if not groups:
        return []
    lines = ["| group | arm | units | AP50 | AP | AP75 |", "|---|---|---|---|---|---|"]
    for i, g in enumerate(groups):
        at = f"{where}.groups[{i}]"
        m = _get(g, "metrics", dict, at, {})
        name, unit = _get(g, "name", str, at), _get(g, "unit", str, at)
        if name is None or unit is None:
            raise ResultsDocError(f"{at}: a group has a 'name' and a 'unit' (what its interval is over)")
        first = next((k for k in ("AP50", "AP", "AP75") if m.get(k)), "AP50")  # a group scored on some metrics
        units = _get(m.get(first) or {}, "units", int, f"{at}.metrics.{first}", 0)
        lines.append(_row([name, _get(g, "arm", str, at) or _get(g, "init", str, at, "—"),
                           f"{units} {unit}{'' if units == 1 else 's'}",
                           *(_mean_ci(m.get(k), f"{at}.metrics.{k}") for k in ("AP50", "AP", "AP75"))]))
    return lines + [""]


def _leaderboard_lines(results: dict, where: str) -> list[str]:
    try:
        board = leaderboard_from_json(_get(results, "leaderboard", list, where, []))
        head, rows = leaderboard_table(board) if board else ([], [])
        correlation = correlation_text(correlation_from_json(results.get("correlation"))) if board else ""
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise ResultsDocError(f"{where}.leaderboard: not what results.json holds ({err})") from None
    if not board:
        return []
    order = ("in the plan's order, not ranked" if all(r.not_ranked for r in board) else
             "sorted by AP, any net not ranked last")
    return [f"Leaderboard ({_md(board[0].arm)}, {order}):", "", _row(head), "|" + "---|" * len(head),
            *map(_row, rows), "", _md(correlation), ""]


def _degradation_and_comparison_lines(results: dict, where: str) -> list[str]:
    lines = []
    nets = _get(results, "degradation", list, where, [])
    if nets:
        lines += ["", "| net | seeds | training error % | val error % | seeds at chance |", "|---|---|---|---|---|"]
        for i, d in enumerate(nets):
            at = f"{where}.degradation[{i}]"
            seeds = _get(_get(d, "train_error", dict, at, {}), "units", int, f"{at}.train_error", 0)
            lines.append(_row([_get(d, "model", str, at, "?"), seeds,
                               _mean_ci(d.get("train_error"), f"{at}.train_error"),
                               _mean_ci(d.get("val_error"), f"{at}.val_error"),
                               len(_get(d, "at_chance", list, at, []))]))
    stuck = {d.get("model") for d in nets if d.get("at_chance")}  # each entry checked above
    comparisons = [(label, _comparison_text(c, f"{where}.{kind}[{i}]", headline=True),
                    _nets_of(kind, i, c, results, where))
                   for kind, label in KINDS for i, c in enumerate(_get(results, kind, list, where, []))]
    if comparisons:
        lines += ["", f"Comparisons (one family: {_md(results.get('family') or 'not adjusted')}):"]
        for label, text, models in comparisons:
            at_chance = [m for m in models if m in stuck]
            lines.append(f"- {label}: {text}" + (
                f"; not read as evidence about depth: {_md(', '.join(at_chance))} did not leave chance in every seed"
                if at_chance else ""))  # as the job's notes (results.degradation_notes)
    return lines


def _comparison_text(d, where: str, *, headline: bool = False) -> str:
    """"A vs B: <describe()>" (or the headline() sentence) of a results.json comparison, every text the file gives
    escaped (names, metric, units, the reasons and the adjustment's words; the statistic's own wording, "P(A > B)",
    is ours), or one line naming it."""
    try:
        c = _escaped(comparison_from_json(d))
        return c.headline() if headline else f"{c.a} vs {c.b}: {c.describe()}"
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        raise ResultsDocError(f"{where}: not a comparison as results.json holds it ({err})") from None


def _escaped(c: Comparison) -> Comparison:
    """The comparison with every text the file gave escaped for Markdown."""
    adj = c.adjustment and replace(c.adjustment, method=_md(c.adjustment.method), family=_md(c.adjustment.family),
                                   reading=c.adjustment.reading and _md(c.adjustment.reading))
    return replace(c, a=_md(c.a), b=_md(c.b), metric=_md(c.metric), unit_a=_md(c.unit_a), unit_b=_md(c.unit_b),
                   why_no_interval=c.why_no_interval and _md(c.why_no_interval), adjustment=adj)


def _nets_of(kind: str, index: int, c: dict, results: dict, where: str) -> tuple[str, ...]:
    """The degradation nets a comparison rests on: its two nets, or an interaction's four; none for the others."""
    if kind == "degradation_comparisons":
        return c.get("a"), c.get("b")
    if kind == "interactions":
        terms = _get(results, "interaction_terms", list, where, [])
        if index < len(terms) and not isinstance(terms[index], list):
            raise ResultsDocError(f"{where}.interaction_terms[{index}]: expected a list of four nets")
        return tuple(terms[index]) if index < len(terms) else ()
    return ()


def _load(doc: Path, cited: str) -> dict:
    path = doc.parent / cited
    try:
        data = read_json(path)
    except RunFileError as err:
        raise ResultsDocError(f"{doc}: the block citing {cited}: {err}") from None
    if data is None:
        raise ResultsDocError(f"{doc}: the block citing {cited} has no such file ({path})")
    return data


def _render(doc: Path, cited: str, kind: str = "results") -> str:
    """The block of the files it cites (one job, or the parts of one preset's job), pooled and decided under the
    current rules (pool.pool_results): one family over all of them; `kind` "headline": render_headline's."""
    paths = cited.split()
    parts = [_load(doc, p) for p in paths]
    for p, part in zip(paths, parts):  # each file as results.json holds it, or one line naming the file and key
        render(part, f"{doc}: {p}")
    if kind == "contrast":  # two jobs, each decided on its own: not one family
        if len(paths) != 2:
            raise ResultsDocError(f"{doc}: a contrast block cites two jobs, got {cited}")
        return render_contrast(*parts, (f"{doc}: {paths[0]}", f"{doc}: {paths[1]}"))
    try:
        pooled = pool_results(parts, paths)
    except (RunFileError, PoolError) as err:
        raise ResultsDocError(f"{doc}: the block citing {cited}: {err}") from None
    if kind == "demo":  # one job, its panel beside its file
        panel = demo_panel(cited)
        if len(paths) != 1 or not (doc.parent / panel).is_file():
            raise ResultsDocError(f"{doc}: a demo block cites one job and its panel {panel} beside it")
        timing = {k: parts[0].get(k) for k in ("wall_minutes", "machine", "date")}  # pooling keeps no timing
        return render_demo(pooled | timing, f"{doc}: {cited}", panel)
    renderer = {"results": render, "headline": render_headline, "groups": render_groups}[kind]
    return renderer(pooled, f"{doc}: {cited}")


def regenerate(doc: Path) -> str:
    """The document's text with every results block rendered anew from the file it cites."""
    text = doc.read_text()
    return BLOCK.sub(lambda m: m["open"] + _render(doc, m["path"], m["kind"]) + m["close"], text)


def stale_blocks(doc: Path) -> list[str]:
    """The files whose blocks in `doc` differ from their rendering (empty: the document says what they hold)."""
    text = doc.read_text()
    return [m["path"] for m in BLOCK.finditer(text) if m["body"] != _render(doc, m["path"], m["kind"])]
