"""backbones.strict_json: every JSON file the project writes is standard JSON (NaN and infinities as null)."""

import json
import math

import numpy as np
import pytest

from backbones.strict_json import strict_json


def _strict_loads(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))


def test_undefined_numbers_are_written_as_null_at_any_depth():
    doc = {"AP": 41.5, "APs": math.nan, "curve": [1.0, math.inf, (-math.inf, 2)], "n": np.float32(0.5)}
    assert _strict_loads(strict_json(doc)) == {"AP": 41.5, "APs": None, "curve": [1.0, None, [None, 2]], "n": 0.5}


def test_what_it_cannot_write_is_an_error_not_a_bad_file():
    with pytest.raises(TypeError):
        strict_json({"x": object()}, default=None)
