"""DATASETS: the recording format (alem_eval.datasets: Recorder / open_recording), Flashbax
Vault export with dataset cards, and ``alem-eval dataset export|info``.

Recordings are built through the Recorder API from synthetic steps (small P, D, A), as the
evaluator hands them over (tests/test_recording.py checks what the evaluator hands over).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from alem_eval.cli.app import main
from alem_eval.datasets import recorder
from alem_eval.datasets.format import (
    FIELDS,
    OBS_NARROW,
    choose_obs_dtype,
    decode_observations,
    encode_observations,
    episode_dir,
    inexact_columns,
    team_path,
)
from alem_eval.datasets.info import dataset_info
from alem_eval.datasets.reader import open_recording
from alem_eval.datasets.recorder import Recorder
from alem_eval.datasets.vault import STAGING_DIR, export_vault, vault_groups
from alem_eval.core.errors import DatasetError
from tests.clitools import (
    assert_one_line_error,
    cli_env,
    closed_port_url,
    run_cli_in_process,
)

P, D, A = 3, 10, 6
SELF = ("tiny/ippo-rnn/easy/seed0",) * P
SELF_B = ("tiny/ippo-rnn/easy/seed1",) * P
MIXED = ("tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0")


def make_steps(t: int, seed: int, obs: str = "int") -> dict[str, np.ndarray]:
    """``t`` steps of synthetic data; ``obs``: int (0..4), signed (-3..3), half (+0.5),
    tiny (x 1e-8), wide (ints, one column of 0.1)."""
    rng = np.random.default_rng(seed)
    o = rng.integers(0, 5, (t, P, D)).astype(np.float32)
    if obs == "signed":
        o -= 3
    elif obs == "half":
        o += 0.5
    elif obs == "tiny":
        o *= np.float32(1e-8)
        o += np.float32(1e-8)
    elif obs == "wide":
        o[..., 4] = np.float32(0.1)
    return {
        "observations": o,
        "legal_actions": rng.random((t, P, A)) < 0.7,
        "actions": rng.integers(0, A, (t, P)).astype(np.int32),
        "rewards": rng.normal(size=(t, P)).astype(np.float32),
        "dones": np.zeros((t, P), bool),
        "team_achievements": np.minimum(np.arange(t) // 20, 30).astype(np.int32),
    }


def concat(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([c[k] for c in chunks]) for k in FIELDS}


def meta_for(steps: dict[str, np.ndarray], episode: int, *, terminated: bool = True) -> dict:
    return {
        "length": len(steps["actions"]),
        "terminated": terminated,
        "episode_return": float(steps["rewards"].mean(axis=1).astype(np.float64).sum()),
        "final_achievements": int(steps["team_achievements"][-1]),
        "world_key": [0, 9999 + episode],
        "step_key": [1, episode],
    }


def record(rec: Recorder, team, episode: int, steps, *, chunk: int = 64, finish: bool = True):
    """Hand ``steps`` to the recorder in evaluator-sized chunks."""
    n = len(steps["actions"])
    for t0 in range(0, n, chunk):
        rec.add_steps(team, episode, t0, {k: v[t0 : t0 + chunk] for k, v in steps.items()})
    if finish:
        rec.finish_episode(team, episode, meta_for(steps, episode))


def new_recorder(root: Path, **kw) -> Recorder:
    return Recorder(root, protocol="fast", eval_difficulty="easy", env_version="0.1.0", **kw)


def assert_same_steps(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(FIELDS)
    assert got["observations"].dtype == np.float32
    np.testing.assert_array_equal(
        got["observations"].view(np.uint32), want["observations"].view(np.uint32)
    )
    for k in FIELDS[1:]:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def ep_files(rec_root: Path, team, episode: int) -> Path:
    return episode_dir(rec_root, "fast", "easy", team, episode)


# ---------------------------------------------------------------------------------------
# Layout and observation dtypes
# ---------------------------------------------------------------------------------------
def test_team_path_is_the_cell_path_or_a_digest_of_the_slots():
    assert team_path(SELF) == "tiny/ippo-rnn/easy/seed0"
    digest = hashlib.sha1(json.dumps(list(MIXED)).encode()).hexdigest()[:12]
    assert team_path(MIXED) == f"mixed/{digest}"
    assert team_path(MIXED) != team_path(MIXED[::-1])  # slot order matters
    for bad in ((), ("../x",), ("a//b",), ("mixed",)):
        with pytest.raises(DatasetError):
            team_path(bad)


def test_inexact_columns_agree_with_a_plain_round_trip():
    """The fast test (one integer round trip + ranges, float16 only where needed) gives
    exactly the columns a float32 -> dtype -> float32 round trip gets wrong."""
    rng = np.random.default_rng(0)
    specials = np.array(
        [0, 1, 255, 256, -1, -128, -129, 127, 128, 0.5, 0.1, 1e-8, 2049, 65504, 1e6, -0.0]
        + [np.nan, np.inf, -np.inf],
        np.float32,
    )
    obs = rng.choice(specials[:3], size=(40, 2, 60)).astype(np.float32)
    for col in range(60):
        obs[rng.integers(0, 40), rng.integers(0, 2), col] = specials[col % len(specials)]
    got = inexact_columns(obs)
    flat = obs.reshape(-1, 60)
    with np.errstate(all="ignore"):
        for name in OBS_NARROW:
            back = flat.astype(name).astype(np.float32)
            want = np.any(back.view(np.uint32) != flat.view(np.uint32), axis=0)
            np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_observation_dtype_is_chosen_per_part_and_read_back_bit_for_bit(tmp_path):
    rec = new_recorder(tmp_path / "rec", part_steps=100)
    kinds = ["int", "half", "tiny", "signed", "wide"]
    chunks = [make_steps(100, i, k) for i, k in enumerate(kinds)]
    chunks.append(make_steps(37, 9, "int"))  # a short last part
    steps = concat(chunks)
    record(rec, SELF, 0, steps, chunk=64)  # chunks straddle the part boundaries

    (ep,) = open_recording(tmp_path / "rec").complete
    parts = ep.meta["parts"]
    assert [(p["t0"], p["steps"]) for p in parts] == [(i * 100, 100) for i in range(5)] + [
        (500, 37)
    ]
    assert [p["observations_dtype"] for p in parts] == [
        "uint8",
        "float16",
        "float32",
        "int8",
        "uint8",
        "uint8",
    ]
    assert [p["observations_wide_columns"] for p in parts] == [0, 0, 0, 0, 1, 0]
    assert_same_steps(ep.arrays(), steps)
    # What is on disk is what episode.json says.
    with np.load(ep.path / parts[4]["file"]) as z:
        assert z["observations"].dtype == np.uint8
        assert z["observations_wide_columns"].tolist() == [4]
        assert z["actions"].dtype == np.uint8 and z["team_achievements"].dtype == np.int16
    assert ep.meta["shapes"]["observations"] == [537, P, D]
    assert ep.meta["dtypes"]["actions"] == "uint8"


def test_nan_and_negative_zero_observations_come_back_bit_for_bit(tmp_path):
    steps = make_steps(50, 1)
    steps["observations"][3, 1, 2] = np.float32(-0.0)
    steps["observations"][7, 0, 5] = np.uint32(0x7FC00001).view(np.float32)  # a NaN payload
    rec = new_recorder(tmp_path / "rec")
    record(rec, SELF, 0, steps)
    (ep,) = open_recording(tmp_path / "rec").complete
    (part,) = ep.meta["parts"]
    assert part["observations_dtype"] == "uint8" and part["observations_wide_columns"] == 2
    assert_same_steps(ep.arrays(), steps)
    # Where float16 would hold every column but the NaN's, it is chosen (-0.0 it holds).
    steps["observations"][8, 2, :] = np.float32(0.25)
    record(rec, SELF, 1, steps)
    ep = open_recording(tmp_path / "rec").complete[1]
    (part,) = ep.meta["parts"]
    assert part["observations_dtype"] == "float16" and part["observations_wide_columns"] == 1
    assert_same_steps(ep.arrays(), steps)


# ---------------------------------------------------------------------------------------
# Completeness: interrupted, damaged, rerun
# ---------------------------------------------------------------------------------------
def test_an_interrupted_episode_is_not_complete_and_a_rerun_completes_it(tmp_path):
    root = tmp_path / "rec"
    steps = make_steps(250, 2)
    killed = new_recorder(root, part_steps=100)
    record(killed, SELF, 0, steps, finish=False)  # two parts written, no episode.json
    path = ep_files(root, SELF, 0)
    assert sorted(p.name for p in path.iterdir()) == ["part-00000.npz", "part-00001.npz"]
    (path / ".tmp-deadbeef0000").write_bytes(b"half a part")  # a write killed midway

    rec = open_recording(root)
    assert rec.complete == ()
    (inc,) = rec.incomplete
    assert inc.path == path and "no episode.json" in inc.reason
    assert not new_recorder(root).is_complete(SELF, 0)
    info = dataset_info(root)
    assert (info["complete_episodes"], info["incomplete_episodes"]) == (0, 1)

    rerun = new_recorder(root, part_steps=120)  # another part size: the old parts go
    record(rerun, SELF, 0, steps)
    assert rerun.is_complete(SELF, 0)
    assert sorted(p.name for p in path.iterdir()) == [
        "episode.json",
        "part-00000.npz",
        "part-00001.npz",
        "part-00002.npz",
    ]
    (ep,) = open_recording(root).complete
    assert [p["steps"] for p in ep.meta["parts"]] == [120, 120, 10]
    assert_same_steps(ep.arrays(), steps)


def test_a_damaged_part_makes_its_episode_incomplete(tmp_path):
    root = tmp_path / "rec"
    steps = make_steps(150, 3)
    record(new_recorder(root, part_steps=100), SELF, 0, steps)
    record(new_recorder(root, part_steps=100), SELF_B, 0, make_steps(30, 4))
    part = ep_files(root, SELF, 0) / "part-00001.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))

    rec = open_recording(root)
    assert [e.team for e in rec.complete] == [SELF_B]
    (inc,) = rec.incomplete
    assert "part-00001.npz damaged" in inc.reason
    recorder = new_recorder(root, part_steps=100)
    assert not recorder.is_complete(SELF, 0) and recorder.is_complete(SELF_B, 0)
    part.unlink()
    assert "part-00001.npz missing" in open_recording(root).incomplete[0].reason

    record(recorder, SELF, 0, steps)  # recorded again from t0 = 0
    assert len(open_recording(root).complete) == 2


def test_a_complete_episode_is_skipped_when_it_comes_again(tmp_path):
    root = tmp_path / "rec"
    steps = make_steps(120, 5)
    record(new_recorder(root), SELF, 0, steps)
    path = ep_files(root, SELF, 0)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in path.iterdir()}
    again = new_recorder(root)
    record(again, SELF, 0, make_steps(120, 6))  # other data: ignored, nothing rewritten
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in path.iterdir()} == before


PRODUCER = {"checkpoint_hash": "c" * 64, "config_hash": "f" * 16, "max_steps": 120}


def test_an_episode_is_reused_only_when_what_produced_it_matches(tmp_path):
    """Each episode.json names what produced it; a recorder declaring another checkpoint,
    config, step cap or env version records the episode again (what differs is said)."""
    root = tmp_path / "rec"
    first = new_recorder(root)
    first.set_producer(SELF, PRODUCER)
    record(first, SELF, 0, make_steps(120, 5))
    (ep,) = open_recording(root).complete
    assert {k: ep.meta[k] for k in PRODUCER} == PRODUCER
    assert (ep.meta["protocol"], ep.meta["eval_difficulty"], ep.meta["env_version"]) == (
        "fast",
        "easy",
        "0.1.0",
    )

    same = new_recorder(root)
    same.set_producer(SELF, dict(PRODUCER))
    assert same.is_complete(SELF, 0) and same.changes(SELF, 0) == []
    assert same.changes(SELF, 1) is None and same.recorded_episodes(SELF) == [0]
    for change, phrase in [
        (dict(max_steps=60), "max_steps 120 (now 60)"),
        (dict(checkpoint_hash="d" * 64), f"checkpoint_hash {'c' * 12} (now {'d' * 12})"),
        (dict(config_hash="e" * 16), f"config_hash {'f' * 16} (now {'e' * 16})"),
    ]:
        other = new_recorder(root)
        other.set_producer(SELF, {**PRODUCER, **change})
        assert not other.is_complete(SELF, 0) and other.changes(SELF, 0) == [phrase]
    env = Recorder(root, protocol="fast", eval_difficulty="easy", env_version="0.2.0")
    env.set_producer(SELF, PRODUCER)
    assert env.changes(SELF, 0) == ["env_version 0.1.0 (now 0.2.0)"]
    # What differs is read from episode.json alone; a reusable episode's parts are checked.
    (ep_files(root, SELF, 0) / "part-00000.npz").write_bytes(b"damaged")
    damaged = new_recorder(root)
    damaged.set_producer(SELF, PRODUCER)
    assert damaged.changes(SELF, 0) is None
    assert other.changes(SELF, 0) == ["config_hash ffffffffffffffff (now eeeeeeeeeeeeeeee)"]

    capped = new_recorder(root)
    capped.set_producer(SELF, {**PRODUCER, "max_steps": 60})
    steps = make_steps(60, 6)
    record(capped, SELF, 0, steps)  # recorded again, replacing the old episode
    (ep,) = open_recording(root).complete
    assert ep.meta["max_steps"] == 60 and ep.length == 60
    assert_same_steps(ep.arrays(), steps)


def test_an_episode_recorded_without_a_producer_is_read_but_never_reused(tmp_path):
    """Recordings made before episodes named their producer still read (open, info,
    export) but are recorded again by a run that declares one."""
    root = tmp_path / "rec"
    steps = make_steps(30, 7)
    record(new_recorder(root), SELF, 0, steps)  # no producer declared: an older recording
    (ep,) = open_recording(root).complete
    assert "checkpoint_hash" not in ep.meta
    assert_same_steps(ep.arrays(), steps)
    assert dataset_info(root)["complete_episodes"] == 1
    assert new_recorder(root).is_complete(SELF, 0)  # nothing declared: nothing to differ

    rec = new_recorder(root)
    rec.set_producer(SELF, PRODUCER)
    assert rec.changes(SELF, 0) == [
        "no checkpoint_hash, config_hash, max_steps recorded (an older alem-eval)"
    ]
    assert not rec.is_complete(SELF, 0)
    record(rec, SELF, 0, make_steps(30, 8))
    assert open_recording(root).complete[0].meta["checkpoint_hash"] == PRODUCER["checkpoint_hash"]


def test_steps_must_be_contiguous_and_add_up_to_the_length(tmp_path):
    rec = new_recorder(tmp_path / "rec")
    steps = make_steps(40, 7)
    rec.add_steps(SELF, 0, 0, {k: v[:20] for k, v in steps.items()})
    with pytest.raises(DatasetError, match="not contiguous"):
        rec.add_steps(SELF, 0, 25, {k: v[20:] for k, v in steps.items()})
    with pytest.raises(DatasetError, match="not started at t=0"):
        rec.add_steps(SELF, 1, 20, {k: v[20:] for k, v in steps.items()})
    with pytest.raises(DatasetError, match="20 steps recorded, but the episode has length 40"):
        rec.finish_episode(SELF, 0, meta_for(steps, 0))
    bad = dict(steps, actions=np.full((40, P), A))
    with pytest.raises(DatasetError, match="actions must be integers"):
        rec.add_steps(SELF, 2, 0, bad)
    with pytest.raises(DatasetError, match="missing"):
        rec.add_steps(SELF, 2, 0, {k: v for k, v in steps.items() if k != "dones"})


def test_memory_holds_at_most_one_part_per_open_episode(tmp_path):
    rec = new_recorder(tmp_path / "rec", part_steps=50)
    steps = {e: make_steps(200, 10 + e) for e in range(3)}
    for t0 in range(0, 200, 30):  # three episodes open at once, interleaved
        for e in range(3):
            rec.add_steps(SELF, e, t0, {k: v[t0 : t0 + 30] for k, v in steps[e].items()})
            assert all(ep.buffered < 50 for ep in rec._open.values())
    for e in range(3):
        rec.finish_episode(SELF, e, meta_for(steps[e], e))
    got = open_recording(tmp_path / "rec").complete
    assert [e.episode for e in got] == [0, 1, 2]
    for ep in got:
        assert_same_steps(ep.arrays(), steps[ep.episode])


# ---------------------------------------------------------------------------------------
# The root: unwritable, full, foreign
# ---------------------------------------------------------------------------------------
def test_an_unwritable_root_is_a_one_line_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anyway: a path under a file fails for all
            (tmp_path / "file").write_text("x")
            target = tmp_path / "file" / "rec"
        else:
            target = locked / "rec"
        with pytest.raises(DatasetError) as err:
            new_recorder(target)
        assert "cannot write" in str(err.value) and "\n" not in str(err.value)
    finally:
        locked.chmod(0o700)


def test_a_full_disk_is_a_one_line_error(tmp_path, monkeypatch):
    rec = new_recorder(tmp_path / "rec", part_steps=10)

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recorder, "write_bytes_atomic", full)
    with pytest.raises(DatasetError, match="No space left on device") as err:
        record(rec, SELF, 0, make_steps(30, 8))
    assert "\n" not in str(err.value) and "part-00000.npz" in str(err.value)


def test_a_root_of_another_format_or_with_other_files_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "recording.json").write_text('{"format": "alem-eval-recording", "version": 2}')
    with pytest.raises(DatasetError, match="version 2"):
        new_recorder(other)
    with pytest.raises(DatasetError, match="version 2"):
        open_recording(other)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match="not empty"):
        new_recorder(busy)
    new_recorder(tmp_path / "fresh")
    new_recorder(tmp_path / "fresh")  # reopening a recording is fine
    assert json.loads((tmp_path / "fresh" / "recording.json").read_text()) == {
        "format": "alem-eval-recording",
        "version": 1,
    }


# ---------------------------------------------------------------------------------------
# Vault export and dataset cards
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two seeds of one cell (2 episodes each, one capped), a mixed team, and an
    interrupted episode."""
    root = tmp_path_factory.mktemp("recorded") / "rec"
    rec = new_recorder(root, part_steps=64)
    data = {}
    for i, (team, episode, n) in enumerate(
        [(SELF, 0, 150), (SELF, 1, 90), (SELF_B, 0, 70), (SELF_B, 1, 130), (MIXED, 0, 80)]
    ):
        steps = make_steps(n, 20 + i, "wide" if i == 1 else "int")
        steps["dones"][-1] = episode == 0  # episode 1 of each team hits the step cap
        record(rec, team, episode, steps, finish=False)
        rec.finish_episode(team, episode, meta_for(steps, episode, terminated=episode == 0))
        data[(team, episode)] = steps
    record(rec, SELF, 2, make_steps(40, 99), finish=False)
    return root, data


def read_vault(path: Path):
    from flashbax.vault import Vault

    return Vault(
        vault_name=path.parent.name, vault_uid=path.name, rel_dir=str(path.parent.parent)
    ).read()


def test_vaults_read_back_with_flashbax_and_equal_the_recording(recorded, tmp_path):
    root, data = recorded
    paths = list(export_vault(root, tmp_path / "vaults").vaults)
    out = tmp_path / "vaults" / "fast" / "easy.vlt"
    assert paths == [
        out / ("mixed_" + team_path(MIXED).split("/")[1]),
        out / "tiny_ippo-rnn_easy_seed0",
        out / "tiny_ippo-rnn_easy_seed1",
    ]
    exp = read_vault(out / "tiny_ippo-rnn_easy_seed0").experience
    # OG-MARL's structure (og_marl/replay_buffers.py): [B=1, T, agents, ...] per key.
    assert set(exp) == {"observations", "actions", "rewards", "terminals", "truncations", "infos"}
    assert set(exp["infos"]) == {"legals", "state"}
    want = concat([data[(SELF, 0)], data[(SELF, 1)]])
    t = 150 + 90
    assert exp["observations"].shape == (1, t, P, D)
    assert exp["observations"].dtype == np.float32  # episode 1 has a 0.1 column
    np.testing.assert_array_equal(np.asarray(exp["observations"][0]), want["observations"])
    np.testing.assert_array_equal(
        np.asarray(exp["infos"]["state"][0]), want["observations"].reshape(t, P * D)
    )
    np.testing.assert_array_equal(np.asarray(exp["actions"][0]), want["actions"])
    assert exp["actions"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(exp["rewards"][0]), want["rewards"])
    np.testing.assert_array_equal(np.asarray(exp["infos"]["legals"][0]), want["legal_actions"])
    terminals, truncations = np.asarray(exp["terminals"][0]), np.asarray(exp["truncations"][0])
    assert terminals.dtype == np.float32
    assert np.flatnonzero(terminals.any(axis=1)).tolist() == [149]  # episode 0 terminated
    assert np.flatnonzero(truncations.any(axis=1)).tolist() == [t - 1]  # episode 1 capped
    assert truncations[-1].tolist() == [1.0] * P

    # The seed-1 recording is all small integers: float32 in the vault all the same (what
    # OG-MARL's systems read without a cast), uint8 only when asked for the narrowest.
    want_b = concat([data[(SELF_B, 0)], data[(SELF_B, 1)]])
    exp_b = read_vault(out / "tiny_ippo-rnn_easy_seed1").experience
    assert exp_b["observations"].dtype == exp_b["infos"]["state"].dtype == np.float32
    card_b = json.loads((out / "tiny_ippo-rnn_easy_seed1" / "card.json").read_text())
    assert card_b["observation_dtype"] == "float32"  # what the vault holds
    np.testing.assert_array_equal(np.asarray(exp_b["observations"][0]), want_b["observations"])
    export_vault(root, tmp_path / "narrow", obs_dtype=None)
    narrow = read_vault(tmp_path / "narrow/fast/easy.vlt/tiny_ippo-rnn_easy_seed1").experience
    assert narrow["observations"].dtype == np.uint8
    np.testing.assert_array_equal(
        np.asarray(narrow["observations"][0]).astype(np.float32), want_b["observations"]
    )


def test_a_vault_samples_through_a_flashbax_trajectory_buffer(recorded, tmp_path):
    import flashbax as fbx
    import jax

    root, _ = recorded
    (path,) = [p for p in export_vault(root, tmp_path / "v").vaults if p.name.endswith("seed1")]
    state = read_vault(path)
    exp = state.experience
    t = exp["actions"].shape[1]
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=4,
        sample_sequence_length=8,
        period=1,
        min_length_time_axis=8,
        max_length_time_axis=t,
    )
    buf = buffer.init(jax.tree.map(lambda x: x[0, 0], exp))
    buf = buffer.add(buf, exp)
    batch = buffer.sample(buf, jax.random.PRNGKey(0)).experience
    assert batch["observations"].shape == (4, 8, P, D)
    assert batch["infos"]["legals"].shape == (4, 8, P, A)
    assert batch["infos"]["state"].shape == (4, 8, P * D)
    assert batch["actions"].shape == batch["terminals"].shape == (4, 8, P)
    # OG-MARL samples the vault's own state directly (populate_from_vault): same shapes.
    direct = buffer.sample(state, jax.random.PRNGKey(1)).experience
    assert jax.tree.map(np.shape, direct) == jax.tree.map(np.shape, batch)


def test_the_card_is_computed_from_the_episodes(recorded, tmp_path):
    root, data = recorded
    paths = export_vault(root, tmp_path / "v", per="group", state=False).vaults
    names = [p.name for p in paths]
    assert names == ["mixed_" + team_path(MIXED).split("/")[1], "tiny_ippo-rnn_easy"]
    group = paths[1]
    card = json.loads((group / "card.json").read_text())
    eps = [data[k] for k in [(SELF, 0), (SELF, 1), (SELF_B, 0), (SELF_B, 1)]]
    returns = np.array([meta_for(s, 0)["episode_return"] for s in eps])
    assert card["source_cells"] == [SELF[0], SELF_B[0]]
    assert [t["slots"] for t in card["teams"]] == [list(SELF), list(SELF_B)]
    assert (card["protocol"], card["eval_difficulty"], card["env_version"]) == (
        "fast",
        "easy",
        "0.1.0",
    )
    assert card["episodes"] == 4 and card["steps"] == 150 + 90 + 70 + 130
    assert card["terminated_episodes"] == 2
    r = card["episode_return"]
    assert r["mean"] == pytest.approx(returns.mean()) and r["std"] == pytest.approx(returns.std())
    assert (r["min"], r["max"]) == pytest.approx((returns.min(), returns.max()))
    assert [r["q25"], r["median"], r["q75"]] == pytest.approx(
        np.percentile(returns, [25, 50, 75]).tolist()
    )
    assert card["observation_dtype"] == "float32"  # one part has a 0.1 column
    assert [e["world_key"] for e in card["episode_list"]] == [[0, 9999], [0, 10000]] * 2
    assert card["vault"]["structure"]["observations"] == {
        "shape": [1, 440, P, D],
        "dtype": "float32",
    }
    assert "infos.state" not in card["vault"]["structure"]  # state=False
    assert set(read_vault(group).experience["infos"]) == {"legals"}
    md = (group / "card.md").read_text()
    assert SELF_B[0] in md and "| episodes (terminated) | 4 (2) |" in md
    # The mixed team's own vault names its slots.
    mixed = json.loads((paths[0] / "card.json").read_text())
    assert mixed["teams"] == [{"slots": list(MIXED), "episodes": 1}]


def test_export_replaces_an_earlier_export(recorded, tmp_path):
    root, _ = recorded
    first = export_vault(root, tmp_path / "v", obs_dtype=None).vaults
    assert read_vault(first[2]).experience["observations"].dtype == np.uint8
    again = export_vault(root, tmp_path / "v").vaults
    assert first == again
    exp = read_vault(again[2]).experience
    assert exp["observations"].dtype == np.float32 and exp["actions"].shape[1] == 200
    assert not [p for p in again[0].parent.iterdir() if p.name.startswith(".")]
    assert not (tmp_path / "v" / "fast" / STAGING_DIR).exists()  # removed once empty


def test_export_reports_its_progress_through_a_callback_and_prints_nothing(
    recorded, tmp_path, capsys
):
    root, _ = recorded
    calls: list[tuple[int, int]] = []
    vaults = export_vault(root, tmp_path / "v", on_progress=lambda *a: calls.append(a)).vaults
    n = len(vaults)
    assert calls == [(i, n) for i in range(n)] + [(n, n)]
    assert capsys.readouterr() == ("", "")


def test_a_killed_exports_leftovers_are_never_taken_for_a_vault(recorded, tmp_path):
    root, _ = recorded
    out = tmp_path / "v"
    export_vault(root, out)
    # A vault half written (or an old one half removed) when the export was killed: it
    # lies in the staging directory beside the .vlt directories, not inside one.
    staging = out / "fast" / STAGING_DIR
    shutil.copytree(out / "fast/easy.vlt/tiny_ippo-rnn_easy_seed1", staging / "seed1-dead")
    assert len(dataset_info(out)["vaults"]) == 3
    assert not [p for p in (out / "fast/easy.vlt").iterdir() if p.name.startswith(".")]
    assert len(export_vault(root, out).vaults) == 3  # a rerun is not stopped by them


def test_the_cards_loading_code_runs_as_written(recorded, tmp_path, monkeypatch):
    root, _ = recorded
    monkeypatch.chdir(tmp_path)
    (path, *_) = export_vault(root, Path("vaults")).vaults
    md = (tmp_path / path / "card.md").read_text()
    code = md.split("```python\n")[1].split("```")[0]
    scope: dict = {}
    exec(code, scope)  # the card's own snippet, as a reader pastes it
    assert (
        scope["experience"]["actions"].shape[1]
        == json.loads((tmp_path / path / "card.json").read_text())["steps"]
    )
    assert 'done_flags=("terminals", "truncations")' in md and "agent 0" in md


def test_info_says_when_steps_were_appended_after_the_card(recorded, tmp_path):
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    root, _ = recorded
    (path,) = [p for p in export_vault(root, tmp_path / "v").vaults if p.name.endswith("seed1")]
    assert dataset_info(path)["card_matches"] is True
    exp = read_vault(path).experience  # its first 5 steps appended through flashbax
    vault = Vault(vault_name=path.parent.name, vault_uid=path.name, rel_dir=str(path.parent.parent))
    state = TrajectoryBufferState(
        experience=exp, current_index=np.asarray(5), is_full=np.asarray(False)
    )
    vault.write(state, source_interval=(0, 5))
    info = dataset_info(path)
    assert (info["steps"], info["card"]["steps"], info["card_matches"]) == (205, 200, False)


def test_info_describes_recordings_and_vaults(recorded, tmp_path):
    root, _ = recorded
    info = dataset_info(root)
    assert info["kind"] == "recording"
    assert (info["complete_episodes"], info["incomplete_episodes"]) == (5, 1)
    assert info["steps"] == 150 + 90 + 70 + 130 + 80
    assert info["arrays"]["observations"] == {"shape": ["T", P, D], "dtype": "float32"}
    assert info["arrays"]["actions"]["dtype"] == "uint8"
    rows = {r["team"]: r for r in info["teams"]}
    assert rows[SELF[0]]["episodes"] == 2 and rows[SELF[0]]["incomplete"] == 1
    assert rows[SELF[0]]["observation_dtypes"] == {"uint8": 3, "uint8+float32 columns": 2}
    assert info["bytes"] == sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    assert json.loads(json.dumps(info)) == info  # plain JSON types

    exported = export_vault(root, tmp_path / "v", obs_dtype=None)
    (left_out,) = exported.incomplete  # the recording's unfinished episode, in no vault
    assert left_out.path == open_recording(root).incomplete[0].path
    (vault,) = [p for p in exported.vaults if p.name.endswith("seed1")]
    vinfo = dataset_info(vault)
    assert vinfo["kind"] == "vault" and vinfo["steps"] == 200
    assert vinfo["structure"]["observations"] == {"shape": [1, 200, P, D], "dtype": "uint8"}
    assert vinfo["card"] == json.loads((vault / "card.json").read_text())
    many = dataset_info(tmp_path / "v")
    assert many["kind"] == "vaults" and len(many["vaults"]) == 3


def test_nothing_to_export_and_bad_paths_are_errors(tmp_path):
    root = tmp_path / "rec"
    record(new_recorder(root), SELF, 0, make_steps(20, 1), finish=False)
    with pytest.raises(DatasetError, match="no complete episode"):
        export_vault(root, tmp_path / "v")
    with pytest.raises(DatasetError, match="no such directory"):
        dataset_info(tmp_path / "missing")
    with pytest.raises(DatasetError, match="neither"):
        dataset_info(tmp_path)
    with pytest.raises(DatasetError, match="grouping"):
        vault_groups(open_recording(root), "seed")


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------
def test_cli_info_and_export_print_the_library_results(recorded, tmp_path):
    root, _ = recorded
    env = cli_env(tmp_path, closed_port_url(), offline=True)
    proc = run_cli_in_process(["dataset", "info", str(root), "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == dataset_info(root)

    out = tmp_path / "cli-vaults"
    proc = run_cli_in_process(
        ["dataset", "export", str(root), "--format", "vault", "--out", str(out), "--per", "group"],
        env,
    )
    assert proc.returncode == 0, proc.stderr
    printed = [Path(line) for line in proc.stdout.split()]
    assert printed == [
        out / "fast" / "easy.vlt" / ("mixed_" + team_path(MIXED).split("/")[1]),
        out / "fast" / "easy.vlt" / "tiny_ippo-rnn_easy",
    ]
    assert "wrote 2 vault(s)" in proc.stderr
    assert "left out 1 incomplete episode(s)" in proc.stderr  # said, not silently skipped
    proc = run_cli_in_process(["dataset", "info", str(printed[1]), "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == dataset_info(printed[1])

    proc = run_cli_in_process(["dataset", "info", str(root)], env)  # the table, for people
    assert proc.returncode == 0, proc.stderr
    assert SELF[0] in proc.stdout and "5 complete episode(s), 1 incomplete" in proc.stderr
    assert "no episode.json" in proc.stderr


def test_cli_errors_are_one_line(recorded, tmp_path):
    root, _ = recorded
    env = cli_env(tmp_path, closed_port_url(), offline=True)
    proc = run_cli_in_process(["dataset", "export", str(root), "--format", "hdf5"], env)
    assert_one_line_error(proc, "unknown dataset format 'hdf5'", "vault")
    assert proc.returncode == 2
    proc = run_cli_in_process(["dataset", "info", str(tmp_path / "nowhere")], env)
    assert_one_line_error(proc, "no such directory")
    where = ["--out", str(tmp_path)]
    proc = run_cli_in_process(["dataset", "export", str(tmp_path / "nowhere"), *where], env)
    assert_one_line_error(proc, "no recording directory")


def test_without_flashbax_export_and_vault_info_name_the_datasets_extra(
    recorded, tmp_path, monkeypatch, capsys
):
    """flashbax is the ``datasets`` extra: without it, the commands that need it fail in one
    line naming the install command, and a recording is still described."""
    root, _ = recorded
    vault = tmp_path / "v" / "fast" / "easy.vlt" / "uid"
    vault.mkdir(parents=True)
    (vault / "metadata.json").write_text('{"structure_shape": {}, "structure_dtype": {}}')
    monkeypatch.setitem(sys.modules, "flashbax", None)  # as if not installed
    for argv in (["export", str(root), "--out", str(tmp_path / "out")], ["info", str(vault)]):
        with pytest.raises(SystemExit) as exc:
            main(["dataset", *argv])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 1 and len(err.splitlines()) == 1, err
        assert err.startswith("alem-eval: error: ") and "needs flashbax" in err, err
        assert err.endswith("pip install 'alem-eval[datasets]'"), err
    assert not (tmp_path / "out").exists()
    assert dataset_info(root)["kind"] == "recording"


# ---------------------------------------------------------------------------------------
# The real observation
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("evaluator")  # the reset test_recording compiles too
def test_the_real_alem_observation_is_uint8_with_a_few_float32_columns():
    """A reset Alem-Coop-Symbolic observation (3 agents, 9,730 values each): 0/1 one-hot
    and count features plus fractions (light levels, normalised stats), which no narrow
    dtype holds; stored as uint8 + those columns in float32, exactly."""
    import jax

    from alem_eval.envs.eval_env import EnvStatics, get_eval_env

    env = get_eval_env(EnvStatics("Alem-Coop-Symbolic", 3, 4, False, False, False, False))
    obs, _ = env.reset(jax.random.PRNGKey(9999), env.difficulty_params("easy"))
    obs = np.asarray(obs)[None]  # [T=1, P, D]
    assert obs.shape == (1, 3, 9730) and obs.dtype == np.float32
    assert np.any((obs > 0) & (obs < 1))  # not an integer array
    dtype, wide = choose_obs_dtype(inexact_columns(obs), obs.shape[-1])
    assert dtype == "uint8" and 0 < wide.size <= 100
    enc = encode_observations(obs, dtype, wide)
    back = decode_observations(enc)
    np.testing.assert_array_equal(back.view(np.uint32), obs.view(np.uint32))
