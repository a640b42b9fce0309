#!/usr/bin/env python3
"""Performance against the references, measured side by side in one run: the sections of tools/benchmarks/
(one module each; BENCHMARKS.md).

    python tools/benchmark.py                          # every section, ~45 minutes on 2 CPU cores
    python tools/benchmark.py --only backbone --repeats 9 --markdown BENCHMARKS-run.md
"""

import sys

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from benchmarks import main  # tools/benchmarks/: this script's directory is first on sys.path

if __name__ == "__main__":
    sys.exit(main())
