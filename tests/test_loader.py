"""A cell directory's checkpoint: ``checkpoint_v<N>/`` beside ``checkpoint/`` wins, highest N
first, like upstream's restore_baseline_checkpoint; load_cell and scoring agree on it."""

from __future__ import annotations

import shutil

import pytest

from alem_eval.core.errors import CheckpointError
from alem_eval.model.loader import cell_checkpoint_dir, load_cell

CELL = "tiny/ippo-rnn/easy/seed0"
LAYOUT = dict(algorithm="ippo-rnn", difficulty="easy", seed=0)


def _spoil(ckpt_dir):
    """Still looks like an orbax checkpoint (its _METADATA is there) but cannot restore."""
    shutil.rmtree(ckpt_dir / "ocdbt.process_0")


def test_load_cell_restores_the_highest_checkpoint_version(cell_copy):
    d = cell_copy(CELL)
    shutil.copytree(d / "checkpoint", d / "checkpoint_v2")
    shutil.copytree(d / "checkpoint", d / "checkpoint_v1")
    _spoil(d / "checkpoint")
    _spoil(d / "checkpoint_v1")
    loaded = load_cell(d, **LAYOUT)
    assert loaded.checkpoint_dir == d / "checkpoint_v2" == cell_checkpoint_dir(d)
    assert loaded.num_params == 340_253


def test_a_cell_with_only_checkpoint_reads_it(cell_copy):
    d = cell_copy(CELL)
    assert load_cell(d, **LAYOUT).checkpoint_dir == d / "checkpoint"
    _spoil(d / "checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_cell(d, **LAYOUT)
    shutil.rmtree(d / "checkpoint")
    with pytest.raises(CheckpointError, match="no orbax checkpoint"):
        load_cell(d, **LAYOUT)
