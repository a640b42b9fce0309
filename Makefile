# Entry points. Every target first runs the one set-up step (idempotent: seconds when nothing changed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# pytest workers: 2 on this project's 2-core reference machine; override with `make test JOBS=8`.
JOBS ?= 2

.PHONY: setup test test-fast test-d2main demo demo-degradation demo-family demo-headline demo-quick lint benchmark device-check

setup:
	$(PYTHON) tools/setup_env.py --venv $(VENV) --quiet

test: setup
	@bash tools/install_test_packages.sh
	$(PY) -m pytest -n $(JOBS) --dist loadgroup --durations=15 tests

# Everything but the end-to-end runs of the tools (tests marked slow): the edit-test loop.
test-fast: setup
	$(PY) -m pytest -n $(JOBS) -m "not slow" tests

# The detection tests against Detectron2 main (what Detectron2's install instructions build) in a second
# environment that reuses .venv's torch and dependencies: D2_MAIN = a source tree or .tar.gz of it.
D2_MAIN ?= $(firstword $(wildcard ../shared/vendor/detectron2-main-*.tar.gz))
test-d2main: setup
	@test -n "$(D2_MAIN)" || { echo "test-d2main: no Detectron2 main source; pass D2_MAIN=PATH (tree or .tar.gz)"; exit 2; }
	$(PYTHON) tools/setup_env.py --venv $(VENV)-d2main --overlay-on $(VENV) --detectron2 $(D2_MAIN) --quiet
	$(VENV)-d2main/bin/python -m pytest -n $(JOBS) -m d2main tests/detection

# The main job's presets (detection/main_job/presets.py PRESETS), each pretraining at 48 px (every kernel tap trained).
# demo: the paper's setting (FrozenBN), one seed per leg (its measured time and machine: README.md's `make demo`
# block); demo-headline: VGG-16(BN) vs ResNet-101, 5 pretraining runs each and the control (the README's first
# result); demo-family: six backbones of three families (the leaderboard, accuracy vs transfer); demo-degradation:
# the degradation experiment (3 seeds); demo-quick: every arm at smoke scale, not converged. Each <= 150 minutes.
demo: setup
	$(PY) tools/main_job.py --preset demo

demo-degradation: setup
	$(PY) tools/main_job.py --preset degradation

demo-family: setup
	$(PY) tools/main_job.py --preset family

demo-headline: setup
	$(PY) tools/main_job.py --preset headline

demo-quick: setup
	$(PY) tools/main_job.py --preset quick

lint: setup
	$(PY) -m ruff check backbones detection classification tools tests

benchmark: setup
	$(PY) tools/benchmark.py

# On a CUDA machine: the `cuda`-marked tests and GPU timings, < 8 min on one GPU (output/device_check/).
device-check: setup
	$(PY) tools/device_check.py
