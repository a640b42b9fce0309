"""metrics.json as Detectron2's JSONWriter writes it -- one JSON object a line, an iteration's scalars with its
number, smoothed over the same window -- but standard JSON: an undefined evaluation number (COCO's APs of a test set
without small objects, the AP of a class without ground truth: NaN, which Detectron2's EvalHook puts in the
storage) is null, where JSONWriter wrote the bare token NaN that jq and JavaScript refuse. Our readers take null as
undefined (detection.report.runs)."""

from __future__ import annotations

import os
from collections import defaultdict

from detectron2.utils.events import CommonMetricPrinter, EventWriter, TensorboardXWriter, get_event_storage
from detectron2.utils.file_io import PathManager

from backbones.strict_json import strict_json
from classification.engine.run_files import METRICS

__all__ = ["StrictJSONWriter", "run_writers"]


class StrictJSONWriter(EventWriter):
    """Detectron2's JSONWriter (same lines, same smoothing window, appended, fsynced) through strict_json."""

    def __init__(self, json_file: str, window_size: int = 20):
        self._file = PathManager.open(json_file, "a")
        self._window_size = window_size
        self._written_up_to = -1

    def write(self) -> None:
        storage = get_event_storage()
        by_iteration: dict[int, dict] = defaultdict(dict)
        for key, (value, iteration) in storage.latest_with_smoothing_hint(self._window_size).items():
            if iteration > self._written_up_to:  # each scalar once
                by_iteration[iteration][key] = value
        if by_iteration:
            self._written_up_to = max(by_iteration)
        for iteration, scalars in by_iteration.items():
            self._file.write(strict_json({**scalars, "iteration": iteration}, indent=None, sort_keys=True) + "\n")
        self._file.flush()
        try:
            os.fsync(self._file.fileno())
        except (AttributeError, OSError):  # a PathManager stream without a descriptor
            pass

    def close(self) -> None:
        self._file.close()


def run_writers(output_dir: str, max_iter: int) -> list[EventWriter]:
    """Detectron2's default_writers (terminal metrics, metrics.json, TensorBoard), metrics.json's in standard JSON."""
    return [CommonMetricPrinter(max_iter), StrictJSONWriter(os.path.join(output_dir, METRICS)),
            TensorboardXWriter(output_dir)]
