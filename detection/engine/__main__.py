"""`python -m detection.engine ...` == tools/train_det.py ... (used to run each benchmark leg in its own process)."""

from .train_net import run

run()
