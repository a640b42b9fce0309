"""Quiet by default and logs a person can read: no warning on `import backbones, detection` (the user's own
filters untouched), progress as lines where stderr is not a terminal, no colour codes in a run's log.txt."""

import logging
import subprocess
import sys

from classification.engine.progress import progress_bar
from conftest import REPO
from detection.engine.train_net import _PlainText


def test_importing_the_packages_prints_no_warning_and_keeps_the_users_filters():
    code = ("import warnings; before = list(warnings.filters); import backbones, detection; "  # (torch and numpy
            "new = [f for f in warnings.filters if f not in before and f[2] is FutureWarning]; "  # add their own)
            "assert not new, new")
    proc = subprocess.run([sys.executable, "-W", "error", "-W", "always::FutureWarning", "-c", code],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]


def test_a_progress_bar_in_a_log_writes_lines_not_carriage_returns(capsys):
    bar = progress_bar(1000, 0, "train")  # pytest's captured stderr is not a terminal
    for _ in range(1000):
        bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n") and all(len(line) <= 100 for line in err.splitlines())
    assert "1000/1000" in err.splitlines()[-1]


def test_colour_codes_are_stripped_from_detectron2_messages():
    record = logging.LogRecord("detectron2", logging.INFO, __file__, 1, "config:\n%s",
                               ("\x1b[38;5;197mMODEL\x1b[39m:\x1b[0m",), None)
    assert _PlainText().filter(record) and record.getMessage() == "config:\nMODEL:"
