"""Standard JSON in a detection run's files: metrics.json's lines as Detectron2's JSONWriter writes them but with
null for an undefined number, and a summary with null APs read as undefined, not refused."""

import json
import math

import pytest
from detectron2.utils.events import EventStorage, JSONWriter

from detection.engine.writers import StrictJSONWriter
from detection.report.runs import _finite_metrics


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_json_lines_are_jsonwriters_with_null_for_nan(tmp_path):
    ours, theirs = StrictJSONWriter(str(tmp_path / "ours.json")), JSONWriter(str(tmp_path / "theirs.json"))
    with EventStorage(0) as storage:
        for it in range(3):
            storage.iter = it
            storage.put_scalars(total_loss=1.0 / (it + 1), lr=0.01)
            if it == 2:
                storage.put_scalars(**{"bbox/AP": 12.5, "bbox/APs": math.nan}, smoothing_hint=False)
            for w in (ours, theirs):
                w.write()
    ours.close(), theirs.close()
    strict = [json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.json"))
              for line in (tmp_path / "ours.json").read_text().splitlines()]
    expected = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                for r in _lines(tmp_path / "theirs.json")]
    assert strict == expected and strict[-1]["bbox/APs"] is None and strict[-1]["iteration"] == 2


def test_a_null_ap_is_undefined_and_left_out():
    assert _finite_metrics({"AP": 50.0, "APs": None, "APm": math.nan}, "evaluation.json") == {"AP": 50.0}
