"""Every term a report uses has a glossary line: each column of its tables and the words of its sentences."""

import html

from detection.report import write_report
from detection.report.glossary import GLOSSARY
from fabricated_runs import COCO_R101, COCO_VGG, classification_run, make_run


def test_every_column_and_term_of_the_report_has_a_glossary_line(tmp_path):
    ckpt = classification_run(tmp_path)
    kw = {"dataset": "embedded_val", "train": ["embedded_train"], "width": 0.25}
    runs = [make_run(tmp_path, f"r101_gn_pretrained_{s}", "resnet101", coco={**COCO_R101, "AP": 20.0 + s},
                     weights=str(ckpt), seed=s, **kw) for s in (0, 1)]
    runs += [make_run(tmp_path, f"r101_gn_scratch_{s}", "resnet101", coco={**COCO_VGG, "AP": 10.0 + 2 * s}, seed=s,
                      **kw) for s in (0, 1)]
    paths = write_report(runs, tmp_path / "report", chance={"embedded_val": {"AP": 0.05, "AP50": 0.26}})
    md = paths["markdown"].read_text()
    glossary = md.split("## Glossary\n\n")[1]
    defined = {html.unescape(line[2:].split(": ", 1)[0]) for line in glossary.splitlines() if line.startswith("- ")}
    body = md.split("## Glossary")[0]
    differs = body.split("## What differs between the configurations\n\n")[1].split("\n")[0]  # groups as columns
    tables = [t for t in body.split("\n\n") if t.startswith("| ") and t.split("\n")[0] != differs]
    heads = {html.unescape(cell.strip()) for t in tables for cell in t.splitlines()[0].strip("|").split(" | ")}
    assert {"AP", "top-1 err %", "95% CI", "units (df)", "val top-1 err %", "status"} <= heads
    assert heads <= defined, sorted(heads - defined)
    for term in ("MDE", "Holm", "95% CI", "unit", "chance (random boxes)", "gn"):  # sentences and run names
        assert term in defined, term
    assert defined <= set(GLOSSARY) and len(defined) < len(GLOSSARY)  # only the terms this report uses
