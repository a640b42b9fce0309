"""matplotlib for the project's figures (the report's, Fig. 6 and Fig. 7): headless, and text drawn as given."""

from __future__ import annotations

__all__ = ["pyplot"]


def pyplot():
    """matplotlib.pyplot on the Agg back end (no display needed), with TeX-math parsing off: run names, class names
    and checkpoint paths are data, and a "$" in one must print as "$" (an unbalanced one used to stop the report
    mid-way)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt
