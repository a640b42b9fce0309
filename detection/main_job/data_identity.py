"""The data's identity: what a job's stages read, recorded in OUTPUT/main_job_data.json and checked on every rerun,
so that stages made from other data are never mixed with new ones and never reported as this data's.

It covers what the stages read, not where it lies: each annotation file by content (sha256), and every image an
annotation file names, or an image folder holds, by its name under its root, its size and its modification time
(whole seconds; a stat per image: no image is read). Data moved or copied with its times (mv, cp -a, rsync -a) is
the same data; an edited image is named. The record has two parts: "pretrain" (the image folder) and "detect"
(the detection data): a change in the detection data alone leaves the finished pretraining valid
(--rerun-changed reruns only the stages a changed part feeds).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from backbones.checkpoint_io import atomic_write_text
from classification.engine.run_files import JOB_DATA, RunFileError, read_json

from .data import COCO, VOC, DataError, DetectData, PretrainData

__all__ = ["DataChange", "data_identity", "data_changes", "check_data_identity", "record_data_identity",
           "file_sha256", "voc_split_sha256", "test_set_identity", "moved_paths"]

VERSION = 2  # 1 (before 2026-12-08): {path: digest} of the annotation files and the folder's listing


@dataclass(frozen=True)
class DataChange:
    part: str  # "pretrain" or "detect"
    what: str  # in words, naming the file or image


def file_sha256(path: Path) -> str:
    """A file's content identity ("sha256:<hex>"): the data's here, a stage's inputs in graph.input_identity."""
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def voc_split_sha256(split_file: Path) -> str:
    """A VOC split's annotations by content: the split file and every annotation it lists."""
    h = hashlib.sha256(split_file.read_bytes())
    annotations = split_file.parent.parent.parent / "Annotations"
    for line in split_file.read_text(encoding="utf-8-sig").splitlines():
        if line.strip():
            h.update((annotations / f"{line.split()[0]}.xml").read_bytes())
    return "split+annotations-sha256:" + h.hexdigest()


def _stamp(path: Path, option: str) -> list[int]:
    """[size, mtime in whole seconds] of a file, or DataError naming it (a dangling link named as one)."""
    try:
        st = path.stat()
    except OSError as err:  # a link to nothing: "[Errno 2]" alone named neither
        raise DataError(f"{option}: {path}: {err.strerror}"
                        + (f" (a link to {os.readlink(path)})" if path.is_symlink() else "")) from None
    return [st.st_size, int(st.st_mtime)]


def _folder_images(root: Path) -> dict[str, list[int]]:
    """Every file under an image folder's train/ and val/, by its name under the root."""
    out = {}
    for split in ("train", "val"):
        for dirpath, dirnames, filenames in os.walk(root / split):
            dirnames.sort()
            for name in sorted(filenames):
                p = Path(dirpath) / name
                out[p.relative_to(root).as_posix()] = _stamp(p, f"--pretrain-data {root}")
    return out


def _named_images(fmt: str, side: tuple[str, ...], option: str, names: tuple[str, ...] | None) -> dict[str, list[int]]:
    """The images one side's annotation file names, by their name under its image root (COCO) or directory (VOC):
    `names` as check_data read them, else (data not checked) from the file itself."""
    root = Path(side[1] if fmt == COCO else side[0])
    if names is None and fmt == COCO:
        from ..datasets.coco import read_coco_json

        names = tuple(str(im.get("file_name")) for im in read_coco_json(side[0]).get("images", []))
    elif names is None:
        split = root / "ImageSets" / "Main" / f"{side[1]}.txt"
        names = tuple(f"JPEGImages/{line.split()[0]}.jpg"
                      for line in split.read_text(encoding="utf-8-sig").splitlines() if line.strip())
    return {n: _stamp(root / n, option) for n in names}


def data_identity(pretrain: PretrainData, detect: DetectData) -> dict:
    """The record of the data a job reads ({} on the embedded default: generated here, its stages' commands say
    which): the version, then a part per input the user gave."""
    out: dict = {}
    if not detect.embedded:
        digest = voc_split_sha256 if detect.format == VOC else file_sha256
        names = detect.images or (None,) * len(detect.sides())
        out["detect"] = [{"role": role, "where": list(side), "annotations": digest(path),
                          "name": str(path) if detect.format == COCO else f"{side[0]} [{side[1]}]",
                          "file": str(path), "images": _named_images(detect.format, side, option, n)}
                         for (role, side, option), path, n in zip(detect.sides(), detect.annotation_files(), names)]
    if pretrain.folder is not None:
        out["pretrain"] = {"where": pretrain.folder, "images": _folder_images(Path(pretrain.folder))}
    return {"version": VERSION, **out} if out else {}


def data_changes(before: dict, now: dict) -> list[DataChange]:
    """What differs between two records, the first difference of each part in words (the paths are not compared:
    data moved is the same data)."""
    changes = []
    for part in ("pretrain", "detect"):
        a, b = before.get(part), now.get(part)
        if a is None or b is None:
            if a is not b:
                changes.append(DataChange(part, f"the job {'had no' if a is None else 'had'} {part} data of yours "
                                                f"and {'has' if b is not None else 'has none'} now"))
            continue
        sides = [(a, b)] if part == "pretrain" else list(zip(a, b))
        if part == "detect" and len(a) != len(b):
            changes.append(DataChange(part, f"{len(a) - 1} train set(s) recorded, {len(b) - 1} given now"))
            continue
        for x, y in sides:
            where = y["where"] if part == "pretrain" else y["name"]
            if x.get("annotations") != y.get("annotations"):
                changes.append(DataChange(part, f"the annotations of {where} changed"))
                break
            if x["images"] != y["images"]:
                changes.append(DataChange(part, _image_change(x["images"], y["images"], where)))
                break
    return changes


def _image_change(a: dict, b: dict, where: str) -> str:
    gone, new = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if gone or new:
        return (f"{where}: {len(gone)} image(s) gone (e.g. {gone[0]})" if gone else
                f"{where}: {len(new)} image(s) added (e.g. {new[0]})")
    changed = sorted(k for k in a if a[k] != b[k])
    how = "size" if a[changed[0]][0] != b[changed[0]][0] else "modification time"
    return f"{where}: {len(changed)} image(s) changed, e.g. {changed[0]} (its {how})"


def moved_paths(out: Path, identity: dict) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(recorded arguments, given arguments) of each part of the data that the record holds with the same content
    elsewhere (moved, or copied with its times): a detection side's (json, image root) or (directory, split), the
    pretraining's ("--data-root", folder). The stages' command lines are updated to name the new place
    (graph.relocate_stages); a part that changed is not moved (its stages rerun or the job stops)."""
    try:
        before = read_json(out / JOB_DATA)
    except RunFileError:
        return []
    if not isinstance(before, dict) or before.get("version") != VERSION:
        return []
    changed = {c.part for c in data_changes(before, identity)}
    moves = []
    if "pretrain" in identity and "pretrain" not in changed:
        moves.append((("--data-root", before["pretrain"]["where"]), ("--data-root", identity["pretrain"]["where"])))
    if "detect" in identity and "detect" not in changed:
        moves += [(tuple(x["where"]), tuple(y["where"])) for x, y in zip(before["detect"], identity["detect"])]
    return [(old, new) for old, new in moves if old != new]


def check_data_identity(out: Path, identity: dict, *, rerun_changed: bool = False) -> set[str]:
    """The parts of the data that changed since the job in `out` recorded its own (those --rerun-changed reruns);
    DataError naming the first change otherwise, nothing changed on disk."""
    try:
        before = read_json(out / JOB_DATA)
    except RunFileError as err:
        raise DataError(f"{err}: the job's data record is unreadable") from None
    if before is None:  # no record: a new job, or one on the embedded default (whose stages' commands say so)
        return set()
    if not isinstance(before, dict) or before.get("version", 1) not in (1, VERSION):
        raise DataError(f"{out / JOB_DATA}: not the job's data record; delete it only if the stages under {out} "
                        "were made from the data given now")
    if "version" not in before:  # version 1: paths -> digests of the annotation files (one migration)
        before = _migrated(before, identity)
    changes = data_changes(before, identity)
    if changes and not rerun_changed:
        parts = {c.part for c in changes}
        keep = " (the pretraining, made from data that did not change, is kept)" if parts == {"detect"} else ""
        raise DataError(f"{out} was run on other data ({changes[0].what}, since {out / JOB_DATA} was recorded): its "
                        f"stages would mix two datasets; rerun with --rerun-changed to rerun the stages it feeds"
                        f"{keep}, --fresh to start over, or give another --output-dir")
    return {c.part for c in changes}


def _migrated(before: dict, now: dict) -> dict:
    """A version-1 record (annotation file path -> content digest) as this version's: annotations compared by
    content as before, the images taken as they are now (version 1 did not record them)."""
    if not all(isinstance(v, str) for v in before.values()):
        raise DataError("main_job_data.json: not the job's data record")
    out = {"version": VERSION}
    if "detect" in now:  # each annotation file against its own path's digest (a swapped pair is a change)
        out["detect"] = [side if before.get(side["file"]) == side["annotations"] else {**side, "annotations": "v1"}
                         for side in now["detect"]]
    if "pretrain" in now:  # version 1's listing: each name and size, in the order walked
        h = hashlib.sha256()
        for name, (size, _) in now["pretrain"]["images"].items():
            h.update(f"{name}\0{size}\n".encode())
        same = before.get(now["pretrain"]["where"]) == "listing-sha256:" + h.hexdigest()
        out["pretrain"] = now["pretrain"] if same else {**now["pretrain"], "images": {}}
    return out


def test_set_identity(dataset: str) -> dict[str, str]:
    """The registered test set a job's legs were scored on, by content (results.json "test_set": parts of a preset
    pool only when scored on one): its COCO json's sha256, or a VOC split's (split file and annotations)."""
    from detectron2.data import MetadataCatalog

    meta = MetadataCatalog.get(dataset)
    if hasattr(meta, "dirname") and hasattr(meta, "split"):
        split = Path(meta.dirname) / "ImageSets" / "Main" / f"{meta.split}.txt"
        return {"name": dataset, "content": voc_split_sha256(split)}
    return {"name": dataset, "content": file_sha256(Path(meta.json_file))}


def record_data_identity(out: Path, identity: dict) -> None:
    if identity:
        atomic_write_text(out / JOB_DATA, json.dumps(identity, indent=1, sort_keys=True))
