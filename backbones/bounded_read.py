"""Reading a file a user hands us: a regular file, at most so many bytes, or one line saying why not.

Every reader of run files, annotations and split lists goes through here, so that the checks the config, weight and
COCO loaders always had hold for all of them: a FIFO among the annotations blocked training forever (open() waits
for a writer), a symlink to /dev/zero filled memory, a directory named like a file gave a traceback.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["UnreadableFile", "DuplicateKey", "regular_file", "read_bytes", "read_text", "read_json", "unique_keys",
           "read_tail", "MiB"]

MiB = 1 << 20


class UnreadableFile(ValueError):
    """A file that is missing, not a regular file, too large, or not the text / JSON it should be."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | os.PathLike, *, limit: int) -> Path:
    """`path` (symlinks followed) when it is a regular file of at most `limit` bytes; UnreadableFile otherwise.
    Checked before open(): opening a FIFO for reading blocks until something writes to it."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UnreadableFile(f"{path}: no such file") from None
    except OSError as err:
        raise UnreadableFile(f"{path}: cannot read ({err.strerror})") from None
    except ValueError as err:  # a NUL byte in a name taken from a file (a split list's id)
        raise UnreadableFile(f"{path!r}: not a usable file name ({err})") from None
    _check_stat(path, st, limit)
    return path


def _check_stat(path: Path, st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(f"{path}: {_kind(st.st_mode)}, not a regular file; refused")
    if st.st_size > limit:
        raise UnreadableFile(f"{path}: {st.st_size:,} bytes, more than the {limit:,} such a file may have; refused")


def read_bytes(path: str | os.PathLike, *, limit: int) -> bytes:
    """The file's bytes as of its size when opened (regular_file's checks, repeated on the open file: what was
    checked is what is read); a log appended to meanwhile is read up to that size."""
    path = regular_file(path, limit=limit)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            _check_stat(path, st, limit)
            return f.read(st.st_size)  # one allocation of the file's size, never of `limit`
    except OSError as err:
        raise UnreadableFile(f"{path}: cannot read ({err.strerror})") from None


def read_text(path: str | os.PathLike, *, limit: int, errors: str = "strict") -> str:
    """The file as UTF-8 text (a BOM dropped); errors="replace" for logs, where a cut multi-byte character is
    expected."""
    data = read_bytes(path, limit=limit)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as err:
        raise UnreadableFile(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


class DuplicateKey(ValueError):
    """A JSON object names one key twice (json keeps the last silently)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json's object_pairs_hook refusing a key given twice in one object: a second "annotations" list silently
    replaced the first (the same cost as a plain parse, measured on a 57 MB COCO file)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise DuplicateKey(f"the key {key!r} twice in one object (JSON keeps the last silently)")
    return obj


def read_json(path: str | os.PathLike, *, limit: int) -> Any:
    """The file's JSON document; a key given twice in one object is refused."""
    text = read_text(path, limit=limit)
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as err:
        raise UnreadableFile(f"{path}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except DuplicateKey as err:
        raise UnreadableFile(f"{path}: {err}") from None


def read_tail(path: str | os.PathLike, nbytes: int) -> str:
    """The last `nbytes` of a regular file of any size (a log), as text with undecodable bytes replaced."""
    path = regular_file(path, limit=1 << 62)
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - nbytes))
            return f.read(nbytes).decode("utf-8", errors="replace")
    except OSError as err:
        raise UnreadableFile(f"{path}: cannot read ({err.strerror})") from None
