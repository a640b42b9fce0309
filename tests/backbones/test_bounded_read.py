"""backbones.bounded_read: the one reader of files a user hands us -- regular files only, a size bound, one line
naming the file -- checked on real FIFOs, devices, directories and oversize files."""

import time

import pytest

from backbones.bounded_read import UnreadableFile, read_bytes, read_json, read_tail, read_text, regular_file
from conftest import make_fifo


def test_a_regular_file_within_the_bound_is_read_and_a_bom_dropped(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf{\"x\": [1, 2]}")
    assert read_json(path, limit=100) == {"x": [1, 2]}
    assert read_text(path, limit=100) == '{"x": [1, 2]}'
    assert read_bytes(path, limit=16) == path.read_bytes()


def test_a_json_key_given_twice_in_one_object_is_refused_naming_it(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"iteration": 1, "loss": 0.5, "iteration": 2}')
    with pytest.raises(UnreadableFile, match="^[^\n]*metrics.json: the key 'iteration' twice in one object"):
        read_json(path, limit=100)
    path.write_text('[{"a": 1}, {"a": 2}]')  # the same key in two objects is fine
    assert read_json(path, limit=100) == [{"a": 1}, {"a": 2}]


def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    """open() on a FIFO waits for a writer: the check comes first. (A writer unblocks a wrong reader after 5 s, so a
    regression fails instead of hanging the suite.)"""
    path = make_fifo(tmp_path / "pipe")
    start = time.monotonic()
    with pytest.raises(UnreadableFile, match=r"pipe: a FIFO \(named pipe\), not a regular file; refused"):
        read_text(path, limit=100)
    assert time.monotonic() - start < 4  # refused, not read to EOF after the writer came


@pytest.mark.parametrize("target, kind", [("/dev/null", "a character device"), (None, "a directory")])
def test_a_device_or_a_directory_behind_a_symlink_is_refused(tmp_path, target, kind):
    link = tmp_path / "metrics.json"
    link.symlink_to(target or tmp_path)
    with pytest.raises(UnreadableFile, match=rf"metrics.json: {kind}, not a regular file; refused"):
        read_json(link, limit=1 << 20)
    with pytest.raises(UnreadableFile, match=kind):
        read_tail(link, 100)


def test_oversize_missing_and_malformed_files_are_one_line_naming_the_file(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnreadableFile, match=r"big.txt: 101 bytes, more than the 100 such a file may have"):
        regular_file(big, limit=100)
    with pytest.raises(UnreadableFile, match="nope.json: no such file"):
        read_json(tmp_path / "nope.json", limit=100)
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1,\n  oops}')
    with pytest.raises(UnreadableFile, match=r"bad.json: not JSON \(line 2, column 3"):
        read_json(bad, limit=100)
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("abc".encode("utf-16"))
    with pytest.raises(UnreadableFile, match="utf16.txt: not UTF-8 text"):
        read_text(utf16, limit=100)


def test_the_tail_of_a_log_is_its_last_bytes(tmp_path):
    log = tmp_path / "log.txt"
    log.write_bytes(b"a" * 1000 + "Traceback \xff".encode("latin-1"))
    assert read_tail(log, 11) == "Traceback \ufffd"
    assert read_tail(log, 10**6).startswith("a" * 1000)
