"""JSON that every parser reads. Python's json writes an undefined number (NaN: COCO's "no objects of this size",
a class without ground truth, a diverged loss) as the bare token NaN, which is not JSON: JavaScript's JSON.parse,
jq and most other readers refuse the whole file. Every JSON file the project writes goes through `strict_json`
(NaN and the infinities as null); the readers of those files take null where a number may be undefined as NaN."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["strict_json", "finite_or_none"]


def finite_or_none(obj: Any) -> Any:
    """`obj` with every non-finite float (in dicts, lists and tuples, at any depth) replaced by None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def strict_json(obj: Any, *, indent: int | None = 2, **kwargs) -> str:
    """json.dumps of `obj` with NaN / inf as null (allow_nan=False: anything missed is an error, not a bad file).
    Numbers of numpy and torch types are written as Python floats (`default=float` unless given)."""
    return json.dumps(finite_or_none(obj), indent=indent, allow_nan=False, **{"default": float, **kwargs})
