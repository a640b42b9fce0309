"""Size limits as habits (issue #46): the experiment layer stays as readable as the backbone layer -- no function
over 60 lines in detection/main_job, detection/report and classification/engine, no module over 500 lines in the
installed packages."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTION_LINES, MODULE_LINES = 60, 500


def test_no_function_in_the_experiment_layer_is_over_60_lines():
    long = []
    for package in ("detection/main_job", "detection/report", "classification/engine"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "split these into named parts: " + "; ".join(long)


def test_no_module_of_the_installed_packages_is_over_500_lines():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for package in ("backbones", "detection", "classification")
            for p in sorted((ROOT / package).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES]
    assert not long, "split these modules by concept: " + "; ".join(long)
