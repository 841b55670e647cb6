"""One atomic writer: the file is complete or untouched, and no temp file is left behind."""

from __future__ import annotations

import json
import os

import pytest

from alem_eval.core import fsutil
from alem_eval.hub.released import write_json_atomic


def test_atomic_write_replaces_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "out.txt"  # parents are created
    fsutil.write_text_atomic(path, "first\n")
    inode = path.stat().st_ino
    fsutil.write_bytes_atomic(path, b"second\n")
    assert path.read_bytes() == b"second\n" and path.stat().st_ino != inode
    assert os.listdir(path.parent) == ["out.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")

    def half_then_interrupt(fh):
        fh.write(b"new but incomplete")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fsutil.atomic_write(path, half_then_interrupt)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]


def test_a_temp_can_be_staged_where_the_targets_readers_never_look(tmp_path):
    refs, staging = tmp_path / "refs", tmp_path / "state"
    seen = []

    def write(fh):
        seen.append(sorted(os.listdir(refs)))  # what a reader of refs/ sees mid-write
        fh.write(b"abc")

    fsutil.atomic_write(refs / "main", write, tmp_dir=staging)
    assert seen == [[]] and (refs / "main").read_bytes() == b"abc"
    assert os.listdir(staging) == []


def test_atomic_files_get_the_permissions_of_a_plain_open(tmp_path):
    old = os.umask(0o022)
    try:
        fsutil.write_text_atomic(tmp_path / "a.txt", "x")
        (tmp_path / "b.txt").write_text("x")
    finally:
        os.umask(old)
    mode = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert mode["a.txt"] == mode["b.txt"] == 0o644


def test_write_json_atomic_goes_through_the_one_writer(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    write_json_atomic(path, {"a": (1, 2)})
    assert json.loads(path.read_text()) == {"a": [1, 2]} and path.read_text().endswith("}\n")
    calls = []
    real = fsutil.atomic_write
    monkeypatch.setattr(
        fsutil, "atomic_write", lambda p, w, **kw: calls.append(p) or real(p, w, **kw)
    )
    with pytest.raises(TypeError, match="not JSON serialisable"):
        write_json_atomic(path, {"a": object()})  # fails mid-dump
    assert calls == [path]
    assert json.loads(path.read_text()) == {"a": [1, 2]} and os.listdir(tmp_path) == ["config.json"]
