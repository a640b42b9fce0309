"""tests/reference (the sources FIDELITY.md cites, MSRA's prototxts, the paper notes) is what its manifest says:
every file listed, none added, none changed."""

import hashlib
from pathlib import Path

import pytest

from reference_sources import REFERENCE

MANIFEST = REFERENCE / "MANIFEST.sha256"
CACHES = {"__pycache__", ".ruff_cache", ".pytest_cache"}  # written by the tools, ignored by git


def read_manifest(path: Path = MANIFEST) -> dict[str, str]:
    """{relative path: sha256} of a `sha256sum` listing ("<hex>  <path>" per line)."""
    entries = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        assert sep and len(digest) == 64 and name, f"{path}:{n}: not '<sha256>  <path>': {line!r}"
        assert name not in entries, f"{path}:{n}: {name} listed twice"
        entries[name] = digest
    return entries


def manifest_problems(root: Path, entries: dict[str, str]) -> list[str]:
    """What differs between the files under `root` and the manifest's entries."""
    present = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and p.name != MANIFEST.name and not CACHES & set(p.parts)}
    problems = [f"{name}: listed in the manifest, missing" for name in sorted(set(entries) - present)]
    problems += [f"{name}: not in the manifest" for name in sorted(present - set(entries))]
    for name in sorted(present & set(entries)):
        digest = hashlib.sha256((root / name).read_bytes()).hexdigest()
        if digest != entries[name]:
            problems.append(f"{name}: sha256 {digest}, the manifest says {entries[name]}")
    return problems


def test_every_reference_file_is_the_one_the_manifest_names():
    assert not manifest_problems(REFERENCE, read_manifest())


@pytest.mark.parametrize("change", ["missing", "extra", "changed"])
def test_the_manifest_check_notices_a_missing_an_extra_and_a_changed_file(tmp_path, change):
    import shutil

    copy = tmp_path / "reference"
    shutil.copytree(REFERENCE, copy)
    entries = read_manifest(copy / MANIFEST.name)
    assert not manifest_problems(copy, entries)
    target = copy / "py-faster-rcnn/lib/fast_rcnn/config.py"
    if change == "missing":
        target.unlink()
    elif change == "extra":
        (copy / "py-faster-rcnn/lib/rpn/extra.py").write_text("x = 1\n")
    else:
        target.write_text(target.read_text().replace("__C.TEST.NMS = 0.3", "__C.TEST.NMS = 0.5"))
    (problem,) = manifest_problems(copy, entries)
    assert {"missing": "missing", "extra": "not in the manifest", "changed": "sha256"}[change] in problem
