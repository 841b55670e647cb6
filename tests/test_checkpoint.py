"""Validate-then-restore of the upstream-written fixture checkpoints, and bad checkpoints."""

import json

import numpy as np
import pytest

from alem_eval.model import checkpoint as ckpt
from alem_eval.core.errors import CheckpointError, ShapeMismatchError
from alem_eval.model.loader import load_cell, verify_cell

from .conftest import ALL_CELLS


def _layout(cell_id):
    budget, algorithm, difficulty, seed = cell_id.split("/")
    return dict(algorithm=algorithm, difficulty=difficulty, seed=int(seed[4:]))


@pytest.mark.parametrize("cell", ALL_CELLS)
def test_every_fixture_cell_restores_with_its_logged_parameter_count(fixtures_root, cell):
    loaded = load_cell(fixtures_root / cell, **_layout(cell))
    logged = json.loads((fixtures_root / cell / "config.json").read_text())["wandb_summary"][
        "num_params"
    ]
    assert loaded.num_params == logged
    leaves = [np.asarray(x) for x in __import__("jax").tree_util.tree_leaves(loaded.weights)]
    assert all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in leaves)


def test_restore_skips_the_optimiser_state_and_optionally_the_critic(fixtures_root):
    cell = "tiny/mappo-rnn/medium/seed0"
    loaded = load_cell(fixtures_root / cell, policy_only=True, **_layout(cell))
    assert set(loaded.weights) == {"actor"}
    assert set(loaded.weights["actor"]) == {"params"}  # no opt_state, no step


def _rewrite_overrides(cell_dir, **changes):
    cfg_path = cell_dir / "config.json"
    data = json.loads(cfg_path.read_text())
    data["reload_overrides"].update(changes)
    cfg_path.write_text(json.dumps(data))


def test_comm_channel_mismatch_is_reported_with_paths_and_a_hint(cell_copy):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    _rewrite_overrides(d, NUM_COMM_CHANNELS=0)
    with pytest.raises(ShapeMismatchError) as info:
        load_cell(d, **_layout("tiny/ippo-rnn/easy/seed0"))
    err = info.value
    by_path = {m.path: m for m in err.mismatches}
    assert by_path["params/params/Dense_0/kernel"].expected == (9718, 32)
    assert by_path["params/params/Dense_0/kernel"].found == (9730, 32)
    assert by_path["params/params/Dense_2/bias"].found == (60,)
    assert any("NUM_COMM_CHANNELS=4" in h for h in err.hints)
    assert "\n" not in str(err)


def test_network_size_mismatch_names_the_key(cell_copy):
    d = cell_copy("tiny/pqn-vdn-rnn/easy/seed0")
    _rewrite_overrides(d, HIDDEN_SIZE=128)
    with pytest.raises(ShapeMismatchError, match="HIDDEN_SIZE"):
        load_cell(d, **_layout("tiny/pqn-vdn-rnn/easy/seed0"))


def test_wrong_algorithm_is_a_clear_error(cell_copy):
    d = cell_copy("tiny/pqn-vdn-rnn/easy/seed0")
    data = json.loads((d / "config.json").read_text())
    data["algorithm"] = "mappo-rnn"
    (d / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="is the algorithm right"):
        load_cell(d)


def test_truncated_data_file_is_detected_not_used(cell_copy):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    data_files = sorted(
        (d / "checkpoint" / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size
    )
    biggest = data_files[-1]
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
    result = verify_cell(
        d, cell_id="tiny/ippo-rnn/easy/seed0", **_layout("tiny/ippo-rnn/easy/seed0")
    )
    assert not result.ok
    assert "\n" not in result.message


def test_gpu_saved_checkpoint_restores_on_cpu(cell_copy):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    sharding = d / "checkpoint" / "_sharding"
    sharding.write_text(sharding.read_text().replace("TFRT_CPU_0", "cuda:0"))
    loaded = load_cell(d, **_layout("tiny/ippo-rnn/easy/seed0"))
    assert loaded.num_params == 340_253


@pytest.mark.parametrize(
    "storage", [{"use_ocdbt": False}, {"use_zarr3": True}], ids=["per-leaf", "zarr3"]
)
def test_other_orbax_storage_layouts_load_the_same_weights(tmp_path, fixtures_root, storage):
    """A checkpoint orbax wrote another way (one directory per leaf, as orbax did before
    OCDBT; or zarr3 chunks) is read like the released OCDBT layout: same shapes checked,
    the same weights restored. The whole tree is rewritten, optimiser state included."""
    import jax
    import orbax.checkpoint as ocp

    cell = "tiny/mappo-rnn/medium/seed0"
    src = fixtures_root / cell / "checkpoint"
    meta = ocp.PyTreeCheckpointer().metadata(src)
    args = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), meta)
    tree = ocp.PyTreeCheckpointer().restore(src, restore_args=args)
    dst = tmp_path / cell
    dst.mkdir(parents=True)
    (dst / "config.json").write_bytes((fixtures_root / cell / "config.json").read_bytes())
    handler = ocp.PyTreeCheckpointHandler(**storage)
    ocp.Checkpointer(handler).save(dst / "checkpoint", args=ocp.args.PyTreeSave(tree))
    assert (dst / "checkpoint" / "manifest.ocdbt").exists() == storage.get("use_ocdbt", True)

    mine, released = (
        load_cell(dst, **_layout(cell)),
        load_cell(fixtures_root / cell, **_layout(cell)),
    )
    assert mine.num_params == released.num_params
    same = jax.tree_util.tree_map(np.array_equal, mine.weights, released.weights)
    assert all(jax.tree_util.tree_leaves(same))


def test_raw_metadata_fallback_agrees_with_orbax(fixtures_root, monkeypatch):
    d = fixtures_root / "tiny/hypermarl-rnn/hard/seed0/checkpoint"
    via_orbax = ckpt.read_tree_metadata(d)

    def broken(_):
        raise ValueError("unknown metadata format")

    monkeypatch.setattr(ckpt, "_metadata_via_orbax", broken)
    assert ckpt.read_tree_metadata(d) == via_orbax


def test_checkpoint_dir_resolution_prefers_the_highest_version(cell_copy):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    (d / "checkpoint").rename(d / "checkpoint_v2")
    import shutil

    shutil.copytree(d / "checkpoint_v2", d / "checkpoint_v10")
    assert ckpt.resolve_checkpoint_dir(d).name == "checkpoint_v10"
    with pytest.raises(CheckpointError, match="not found"):
        ckpt.resolve_checkpoint_dir(d / "nope")


def test_missing_config_is_a_one_line_error(cell_copy):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    (d / "config.json").unlink()
    result = verify_cell(d, cell_id="x")
    assert not result.ok and "config.json is missing" in result.message


def test_checkpoint_hash_is_content_based(cell_copy, fixtures_root):
    d = cell_copy("tiny/ippo-rnn/easy/seed0")
    h = ckpt.checkpoint_hash(d / "checkpoint")
    assert h == ckpt.checkpoint_hash(fixtures_root / "tiny/ippo-rnn/easy/seed0/checkpoint")
    f = next((d / "checkpoint" / "ocdbt.process_0" / "d").iterdir())
    b = bytearray(f.read_bytes())
    b[-1] ^= 1
    f.write_bytes(bytes(b))
    assert ckpt.checkpoint_hash(d / "checkpoint") != h


def _count_opens_under(monkeypatch, root):
    """The files under ``root`` opened from now on (the hash reads each one it hashes)."""
    from pathlib import Path

    opened = []
    real_open = Path.open

    def counting_open(self, *args, **kwargs):
        if root in self.parents:
            opened.append(self)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting_open)
    return opened


def test_checkpoint_hash_of_unchanged_files_is_not_read_again(cell_copy, monkeypatch):
    d = cell_copy("tiny/ippo-rnn/easy/seed0") / "checkpoint"
    opened = _count_opens_under(monkeypatch, d)
    h = ckpt.checkpoint_hash(d)
    assert len(opened) == sum(p.is_file() for p in d.rglob("*"))
    opened.clear()
    assert ckpt.checkpoint_hash(d) == h
    assert opened == []  # from the memo: no weight byte read


def test_checkpoint_hash_rehashes_a_touched_or_rewritten_file(cell_copy, tmp_path, monkeypatch):
    import os
    import shutil

    d = cell_copy("tiny/ippo-rnn/easy/seed0") / "checkpoint"
    h = ckpt.checkpoint_hash(d)
    f = next((d / "ocdbt.process_0" / "d").iterdir())
    opened = _count_opens_under(monkeypatch, d)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched, same bytes
    assert ckpt.checkpoint_hash(d) == h and f in opened
    # Same size, same mtime, same inode, other bytes (mtime put back): the ctime still moved.
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    with f.open("r+b") as fh:
        fh.write(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = ckpt.checkpoint_hash(d)
    fresh = tmp_path / "fresh-copy"
    shutil.copytree(d, fresh)
    assert changed != h and changed == ckpt.checkpoint_hash(fresh)


def test_checkpoint_hash_memo_corrupt_or_unwritable_is_ignored(cell_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("ALEM_EVAL_CACHE", str(tmp_path / "alem-cache"))
    d = cell_copy("tiny/ippo-rnn/easy/seed0") / "checkpoint"
    h = ckpt.checkpoint_hash(d)
    memos = [
        p for p in (tmp_path / "alem-cache").rglob("*.json") if str(d.resolve()) in p.read_text()
    ]
    assert memos, "the memo is written under the alem-eval cache"
    for m in memos:
        m.write_text("{ not json")
    opened = _count_opens_under(monkeypatch, d)
    assert ckpt.checkpoint_hash(d) == h and opened  # recomputed, memo written again
    opened.clear()
    assert ckpt.checkpoint_hash(d) == h and opened == []
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("ALEM_EVAL_CACHE", str(blocker / "cache"))  # nothing can be written
    assert ckpt.checkpoint_hash(d) == h
    assert ckpt.checkpoint_hash(d) == h and opened  # read each time, never an error
