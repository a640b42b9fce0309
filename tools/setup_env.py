#!/usr/bin/env python3
"""Create or update the project's virtual environment (.venv): the one set-up entry point.

Installs, in order:
  1. torch and torchvision at TORCH_PINS (the project's one statement of them; a pip constraint for every later
     step, so no other package can pull a different torch);
  2. Detectron2, one of (--detectron2):
     `0.6` (default): the PyPI sdist `pb1-detectron2==0.6`, sha256-pinned, patched by tools/patch_detectron2.py
       (later upstream fixes for numpy 2 / Pillow 10 / setuptools 81; no C++ build), a real distribution;
     PATH: a Detectron2 source tree or .tar.gz (e.g. a checkout of main, which Detectron2's install instructions
       build): built as it is, compiled ops included (needs a C++ compiler), nothing patched;
     `installed`: the Detectron2 the environment already has, untouched (a cluster's own build);
  3. this project in editable mode with its dev extras.
--overlay-on BASE makes the new environment see BASE's packages (torch and every dependency) and install only
what differs (Detectron2, this project): a second environment for another Detectron2 costs only its build.
A stamp file records what was installed; when nothing changed, a re-run only checks versions (seconds).

Usage: python3 tools/setup_env.py [--venv DIR] [--detectron2 0.6|PATH|installed] [--overlay-on BASE] [--recreate]
                                  [--quiet] [--check]
Stdlib only, so it can explain a wrong interpreter instead of failing on an import.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

MIN_PYTHON = (3, 10)
TORCH_PINS = ("torch==2.14.1", "torchvision==0.29.1")
D2_REQUIREMENT = "pb1-detectron2==0.6"
D2_SHA256 = "5d2e9e51e523ec72f6a31cca04b0a515492e9514b773a3d134cedc0677170b29"
D2_SDIST = "pb1-detectron2-0.6.tar.gz"
# (distribution, version or None): what a complete environment must contain besides Detectron2.
REQUIRED_DISTS = (*(tuple(pin.split("==")) for pin in TORCH_PINS), ("resnet-detection-benchmark", None),
                  ("faster-coco-eval", None), ("orjson", None), ("pytest", None), ("deepforest", "2.1.0"))
D2_DEFAULT = "0.6"
# Test data only: real-world VOC XML (tree crowns) shipped in the deepforest wheel (MIT); its deps are not needed.
TEST_DATA_WHEELS = ("deepforest==2.1.0",)

ROOT = Path(__file__).resolve().parent.parent
STAMP_NAME = ".setup-stamp.json"


class SetupError(Exception):
    """A problem the user can fix; printed without a traceback."""


def log(msg: str) -> None:
    print(f"[setup] {msg}", flush=True)


def run(cmd: list[str], what: str, quiet: bool, env: dict | None = None) -> None:
    log(what)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").splitlines()[-25:])
        raise SetupError(f"step failed ({what}), exit code {proc.returncode}:\n  {' '.join(cmd)}\n{tail}")
    log(f"  done in {time.time() - t0:.1f}s")


def inputs_digest(d2: str = D2_DEFAULT, overlay: Path | None = None) -> str:
    h = hashlib.sha256()
    for rel in ("pyproject.toml", "tools/setup_env.py", "tools/patch_detectron2.py",
                "detection/detectron2_c_placeholder.py"):  # installed as the patched sdist's detectron2/_C.py
        h.update((ROOT / rel).read_bytes())
    h.update(f"{sys.version_info[:2]} {d2} {overlay}".encode())
    if d2 not in (D2_DEFAULT, "installed"):  # a source tree or archive: its contents count, not just its name
        src = Path(d2)
        files = [src] if src.is_file() else sorted(f for f in src.rglob("*.py") if ".git" not in f.parts)
        for f in files:
            h.update(f.read_bytes())
    return h.hexdigest()


def required_dists(d2: str) -> list[tuple[str, str | None]]:
    """What the environment must contain; the Detectron2 entry depends on where it comes from."""
    if d2 == D2_DEFAULT:
        return [*REQUIRED_DISTS, ("pb1-detectron2", "0.6")]
    return [*REQUIRED_DISTS, ("detectron2", None) if d2 != "installed" else ("(import) detectron2", None)]


def check_interpreter() -> None:
    if sys.version_info[:2] < MIN_PYTHON:
        raise SetupError(
            f"this project needs Python >= {'.'.join(map(str, MIN_PYTHON))}, but {sys.executable} is "
            f"{'.'.join(map(str, sys.version_info[:3]))}.\n"
            "  Fix: run with a newer interpreter, e.g. `make setup PYTHON=python3.11` "
            "(Debian: `apt install python3.11 python3.11-venv`)."
        )
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError as err:
        raise SetupError(
            f"{sys.executable} cannot create virtual environments ({err}).\n"
            f"  Fix (Debian/Ubuntu): apt install python{sys.version_info[0]}.{sys.version_info[1]}-venv"
        ) from err


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def inspect_venv(venv: Path) -> str:
    """'absent', 'ok', or raise SetupError describing why the existing directory is unusable."""
    if not venv.exists():
        return "absent"
    hint = f"\n  Fix: delete it (`rm -rf {venv}`) or rerun with --recreate."
    py = venv_python(venv)
    if not (venv / "pyvenv.cfg").is_file() or not py.exists():
        raise SetupError(f"{venv} exists but is not a complete virtual environment (no pyvenv.cfg or bin/python)."
                         + hint)
    probe = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SetupError(f"{py} does not run (its base interpreter may have been removed):\n"
                         f"  {probe.stderr.strip()[-300:]}" + hint)
    have = probe.stdout.strip()
    want = "{}.{}".format(*sys.version_info[:2])
    if have != want:
        raise SetupError(f"{venv} was made with Python {have}, but set-up now runs with Python {want} "
                         f"({sys.executable}).\n  Fix: rerun with that Python (`make setup PYTHON=python{have}`), "
                         f"or rebuild it: `rm -rf {venv}` (or --recreate).")
    if subprocess.run([str(py), "-m", "pip", "--version"], capture_output=True).returncode != 0:
        raise SetupError(f"{venv} has no working pip." + hint)
    return "ok"


def missing_dists(venv: Path, d2: str = D2_DEFAULT) -> list[str]:
    code = (
        "import json, sys, importlib.metadata as m, importlib.util as u\n"
        f"req = {required_dists(d2)!r}\n"
        "bad = []\n"
        "for name, ver in req:\n"
        "    if name.startswith('(import) '):\n"
        "        mod = name.split()[-1]\n"
        "        if u.find_spec(mod) is None: bad.append(f'{mod} (not importable)')\n"
        "        continue\n"
        "    try:\n"
        "        got = m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        bad.append(f'{name} (not installed)'); continue\n"
        "    if ver and got.split('+')[0] != ver:\n"
        "        bad.append(f'{name} {got} (want {ver})')\n"
        "print(json.dumps(bad))\n"
    )
    out = subprocess.run([str(venv_python(venv)), "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        return ["(could not query installed packages)"]
    return json.loads(out.stdout)


def fetch_and_patch_detectron2(venv: Path, pip: list[str], quiet: bool) -> Path:
    """Download the sha256-pinned sdist, unpack it under the venv and apply the backported fixes."""
    work = venv / "src"
    work.mkdir(exist_ok=True)
    sdist = work / D2_SDIST
    if not sdist.is_file():
        req = work / "detectron2-sdist.txt"
        req.write_text(f"{D2_REQUIREMENT} --hash=sha256:{D2_SHA256}\n")
        # --no-build-isolation: pip prepares metadata by running the *unpatched* setup.py, which imports torch
        # (installed in step 1). The hash is verified before anything from the sdist runs.
        run(pip + ["download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--require-hashes",
                   "-r", str(req), "-d", str(work)], f"downloading {D2_REQUIREMENT} (sha256 pinned)", quiet)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != D2_SHA256:
        sdist.unlink()
        raise SetupError(f"{sdist} has sha256 {digest}, expected {D2_SHA256}; removed it, rerun to download again.")
    src = work / "pb1-detectron2-0.6"
    if src.exists():
        shutil.rmtree(src)
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    sys.path.insert(0, str(ROOT / "tools"))
    from patch_detectron2 import PatchError, patch_tree

    try:
        n = patch_tree(src)
    except PatchError as err:
        raise SetupError(str(err)) from err
    log(f"patched {n} files of the Detectron2 0.6 sources (tools/patch_detectron2.py)")
    return src


def is_up_to_date(venv: Path, d2: str = D2_DEFAULT, overlay: Path | None = None) -> bool:
    stamp = venv / STAMP_NAME
    if not stamp.is_file():
        return False
    try:
        recorded = json.loads(stamp.read_text()).get("inputs")
    except (json.JSONDecodeError, OSError):
        return False
    return recorded == inputs_digest(d2, overlay) and not missing_dists(venv, d2)


def detectron2_source_tree(venv: Path, source: Path) -> Path:
    """A Detectron2 source tree to build: `source` itself, or the archive unpacked under the venv."""
    if not source.exists():
        raise SetupError(f"--detectron2 {source}: no such source tree or archive")
    if source.is_dir():
        tree = source
    else:
        if not tarfile.is_tarfile(source):
            raise SetupError(f"--detectron2 {source}: not a source tree or a .tar.gz archive")
        work = venv / "src" / "detectron2-source"
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        with tarfile.open(source) as tar:
            tar.extractall(work, filter="data")
        tops = [p for p in work.iterdir() if p.is_dir()]
        tree = tops[0] if len(tops) == 1 and not (work / "setup.py").exists() else work
    if not (tree / "setup.py").is_file() or not (tree / "detectron2" / "__init__.py").is_file():
        raise SetupError(f"--detectron2 {source}: no setup.py and detectron2/ package in {tree}")
    sys.path.insert(0, str(ROOT / "tools"))
    from patch_detectron2 import PatchError, drop_missing_projects

    try:
        dropped = drop_missing_projects(tree)
    except PatchError as err:
        raise SetupError(str(err)) from err
    if dropped:
        log(f"{tree}: its setup.py lists project packages the tree lacks (a snapshot without projects/); "
            "building without them (tools/patch_detectron2.py drop_missing_projects)")
    return tree


def write_overlay(venv: Path, base: Path) -> None:
    """Let `venv` see `base`'s packages after its own: a .pth running site.addsitedir on base's site-packages."""
    def site_packages(env: Path) -> Path:
        found = sorted(env.glob("lib/python*/site-packages"))
        if len(found) != 1:
            raise SetupError(f"{env}: expected one lib/python*/site-packages, found {len(found)}")
        return found[0]

    if not (base / "pyvenv.cfg").is_file():
        raise SetupError(f"--overlay-on {base}: not a virtual environment (run `make setup` to create .venv)")
    (site_packages(venv) / "_overlay_on_base.pth").write_text(
        f"import site; site.addsitedir({str(site_packages(base))!r})\n")


FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


def ensure_fashion_mnist(quiet: bool) -> None:
    """Best effort: Debian's dataset-fashion-mnist gives the embedded default real objects (else synthetic)."""
    if FASHION_MNIST.is_file() or not shutil.which("apt-get") or os.geteuid() != 0:
        return
    proc = subprocess.run(["apt-get", "install", "-y", "-q", "dataset-fashion-mnist"], capture_output=True,
                          text=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if proc.returncode == 0:
        log("installed Debian's dataset-fashion-mnist (real objects for the embedded default dataset)")
    elif not quiet:
        log("dataset-fashion-mnist not installed (apt-get failed); the embedded dataset uses synthetic shapes")


def setup(venv: Path, recreate: bool, quiet: bool, check_only: bool = False, d2: str = D2_DEFAULT,
          overlay: Path | None = None) -> None:
    t_start = time.time()
    check_interpreter()
    if d2 not in (D2_DEFAULT, "installed"):
        d2 = str(Path(d2).resolve())
    if not check_only and overlay is None:
        ensure_fashion_mnist(quiet)
    if recreate and venv.exists():
        log(f"removing {venv}")
        shutil.rmtree(venv)
    state = inspect_venv(venv)
    if state == "ok" and is_up_to_date(venv, d2, overlay):
        log(f"{venv} is up to date ({time.time() - t_start:.1f}s)")
        return
    if check_only:
        raise SetupError(f"{venv} is {'absent' if state == 'absent' else 'out of date'}; run `make setup`")
    stamp = venv / STAMP_NAME
    digest = inputs_digest(d2, overlay)
    if state == "absent":
        run([sys.executable, "-m", "venv", str(venv)], f"creating {venv}", quiet)
    else:
        log(f"updating {venv}; missing or outdated: {', '.join(missing_dists(venv, d2)) or 'inputs changed'}")
    stamp.unlink(missing_ok=True)
    if overlay is not None:
        write_overlay(venv, overlay)
    py = str(venv_python(venv))
    constraints = venv / "constraints.txt"
    constraints.write_text("\n".join(TORCH_PINS) + "\n")
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    pip_install = pip + ["install", "-c", str(constraints)] + (["-q"] if quiet else [])
    run(pip_install + list(TORCH_PINS) + ["setuptools>=64", "wheel"], "installing " + " ".join(TORCH_PINS), quiet)
    project = ["-e", f"{ROOT}[dev]"]
    if d2 == D2_DEFAULT:
        d2_src = fetch_and_patch_detectron2(venv, pip, quiet)
        run(pip_install + ["--no-build-isolation", str(d2_src), *project],
            "installing Detectron2 0.6 (patched, no compiled ops) and this project (editable, dev extras)", quiet)
    elif d2 == "installed":
        if subprocess.run([py, "-c", "import detectron2"], capture_output=True).returncode != 0:
            raise SetupError(f"--detectron2 installed: {venv} has no importable Detectron2; install it there "
                             "first, or use --detectron2 0.6 / PATH")
        run(pip_install + project, "installing this project (editable, dev extras) beside the installed "
                                   "Detectron2, which is left untouched", quiet)
    else:
        tree = detectron2_source_tree(venv, Path(d2))
        # --no-build-isolation: its setup.py imports torch to build the compiled ops against the installed one
        run(pip_install + ["--no-build-isolation", str(tree)],
            f"building Detectron2 from {d2} (compiled ops included; minutes)", quiet)
        run(pip_install + project, "installing this project (editable, dev extras)", quiet)
    run(pip_install + ["--no-deps", *TEST_DATA_WHEELS], "installing test data wheels (no dependencies)", quiet)
    missing = missing_dists(venv, d2)
    if missing:
        raise SetupError(f"after installing, still missing or wrong: {', '.join(missing)}")
    stamp.write_text(json.dumps({"inputs": digest, "python": sys.version.split()[0], "detectron2": d2,
                                 "overlay_on": str(overlay) if overlay else None,
                                 "installed_at": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    log(f"ready: {venv} ({time.time() - t_start:.0f}s). Activate with `. {venv}/bin/activate`.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv", help="environment directory (default: .venv)")
    ap.add_argument("--recreate", action="store_true", help="delete the environment first")
    ap.add_argument("--quiet", action="store_true", help="only print step summaries")
    ap.add_argument("--check", action="store_true", help="only check; exit 2 if anything would be installed")
    ap.add_argument("--detectron2", default=D2_DEFAULT, metavar="0.6|PATH|installed",
                    help="which Detectron2: the pinned 0.6 sdist (default), a source tree or .tar.gz built as it "
                         "is, or the one the environment already has, untouched")
    ap.add_argument("--overlay-on", type=Path, metavar="BASE",
                    help="reuse environment BASE's packages (torch, dependencies); install only what differs")
    args = ap.parse_args()
    try:
        setup(args.venv.resolve(), args.recreate, args.quiet, check_only=args.check, d2=args.detectron2,
              overlay=args.overlay_on.resolve() if args.overlay_on else None)
    except SetupError as err:
        print(f"[setup] ERROR: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("[setup] interrupted; rerun to continue (completed steps are kept)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
