"""A full disk says so, with how much space a checkpoint needs, and loses nothing."""

import errno
import shutil
from collections import namedtuple

import pytest
import torch

from engine.contract.atomic import DiskFull, atomic_write
from engine.runtime.checkpoint import atomic_torch_save

Usage = namedtuple("Usage", "total used free")


def test_enospc_names_the_disk_and_keeps_the_previous_file(tmp_path):
    target = tmp_path / "last.pt"
    atomic_torch_save({"model": torch.zeros(1000)}, target)
    before = target.read_bytes()

    def fill(fh):
        fh.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFull, match=r"the disk holding .* is full .*previous last.pt took"):
        atomic_write(target, fill)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temp file left behind


def test_torch_saves_unexpected_pos_on_a_full_disk_reads_as_disk_full(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9, 0))

    def torch_save_on_full_disk(fh):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 79040 vs 78992")

    with pytest.raises(DiskFull, match="is full"):
        atomic_write(tmp_path / "last.pt", torch_save_on_full_disk)


def test_other_errors_pass_through(tmp_path):
    def broken(fh):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        atomic_write(tmp_path / "x", broken)
