"""RECORDING: every evaluated step streams out of the compiled rollout (``score --record``).

The recorder here is an in-memory stand-in with the :class:`alem_eval.datasets.recorder.Recorder`
call protocol (add_steps / finish_episode), so these tests check what the evaluator hands
over; the on-disk format has its own tests (test_datasets.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from alem_eval.evaluate.records import RecordTo
from alem_eval.evaluate.rollout import run_teams
from alem_eval.evaluate.settings import eval_statics
from alem_eval.core.errors import DatasetError
from tests.conftest import FIXTURES
from tests.eval_support import EVALUATOR_GROUP, MIXED_CELLS, MIXED_RUN, MIXED_TEAMS, load

# The tests of the recorded MIXED batch share the evaluator group's programs (its unrecorded
# twin is test_teams'); the two `score --record` tests share only their own program (one
# IPPO cell recorded), so they are a group of their own, free to run on the other worker.
PLAYS = pytest.mark.xdist_group(EVALUATOR_GROUP)
RECORD_CLI = pytest.mark.xdist_group("evaluator-record-cli")

# test_teams' mixed batch (every algorithm, mixed teams, episodes that start as refills):
# scored unrecorded, it is that test's program.
EPISODES = MIXED_RUN["num_episodes"]
IPPO = MIXED_CELLS[0]


class MemoryRecorder:
    """Keeps what the evaluator hands over: steps per (team, episode), and the metas."""

    def __init__(self, fail_after: int | None = None):
        self.steps: dict[tuple, list[tuple[int, dict[str, np.ndarray]]]] = {}
        self.meta: dict[tuple, dict[str, Any]] = {}
        self.fail_after = fail_after
        self.calls = 0

    def add_steps(self, team, episode, t0, arrays):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise DatasetError("disk full (test)")
        self.steps.setdefault((tuple(team), episode), []).append(
            (t0, {k: np.array(v) for k, v in arrays.items()})
        )

    def finish_episode(self, team, episode, meta):
        self.meta[(tuple(team), episode)] = dict(meta)

    def episode(self, team, episode) -> dict[str, np.ndarray]:
        parts = self.steps[(tuple(team), episode)]
        t = 0
        for t0, arrays in parts:
            assert t0 == t, f"steps not contiguous: part at {t0}, expected {t}"
            t += len(arrays["actions"])
        return {k: np.concatenate([a[k] for _, a in parts]) for k in parts[0][1]}


@pytest.fixture(scope="module")
def recorded():
    cells = [load(c) for c in MIXED_CELLS]
    rec = MemoryRecorder()
    res = run_teams(
        [c.cfg for c in cells],
        [c.weights for c in cells],
        MIXED_TEAMS,
        **MIXED_RUN,
        record=RecordTo(rec, list(MIXED_CELLS)),
    )
    return res, rec, cells, MIXED_TEAMS


@PLAYS
def test_every_step_of_every_episode_is_recorded_once_and_matches_the_scores(recorded):
    res, rec, _, teams = recorded
    assert res.record_error is None
    for i, team in enumerate(teams):
        names = tuple(MIXED_CELLS[m] for m in team)
        for e in range(EPISODES):
            steps = rec.episode(names, e)
            meta = rec.meta[(names, e)]
            record = res.records[i][e]
            n = int(record["episode_length"])
            assert len(steps["actions"]) == n == meta["length"]
            assert meta["episode_return"] == record["episode_return"]
            assert meta["terminated"] == bool(record["terminated"])
            assert steps["observations"].shape[:2] == (n, 3)
            assert steps["legal_actions"].dtype == bool
            assert steps["team_achievements"][-1] == meta["final_achievements"]


@PLAYS
def test_recording_does_not_change_the_scores(recorded):
    res, _, cells, teams = recorded
    plain = run_teams([c.cfg for c in cells], [c.weights for c in cells], teams, **MIXED_RUN)
    assert plain.records == res.records


@PLAYS
def test_recorded_actions_replayed_from_the_recorded_keys_reproduce_the_episode(recorded):
    """The env alone, fed the recorded actions from the recorded world and step keys,
    sees the recorded observations and ends with the recorded achievements."""
    from alem_eval.envs.eval_env import get_eval_env

    res, rec, cells, teams = recorded
    names = tuple(MIXED_CELLS[m] for m in (3, 0, 1))  # PQN, IPPO, MAPPO
    assert (3, 0, 1) in teams
    env = get_eval_env(eval_statics(cells[0].cfg).world)
    dyn = env.difficulty_params("easy")
    for e in (0, EPISODES - 1):
        steps, meta = rec.episode(names, e), rec.meta[(names, e)]
        obs, state = env.reset(np.asarray(meta["world_key"], np.uint32), dyn)
        key = np.asarray(meta["step_key"], np.uint32)
        for t in range(meta["length"]):
            np.testing.assert_array_equal(np.asarray(obs), steps["observations"][t], f"t={t}")
            key, _, env_key = jax.random.split(key, 3)
            out = env.step(env_key, state, steps["actions"][t], dyn)
            obs, state = out.obs, out.state
            np.testing.assert_array_equal(np.asarray(out.reward), steps["rewards"][t])
        assert int(env.team_achievements(state)) == meta["final_achievements"]


@PLAYS
def test_the_public_policy_takes_the_recorded_actions_from_the_recorded_inputs(recorded):
    """``alem_eval.load_policy(cell).act`` fed each episode's recorded observations and
    legal actions, step by step from ``init``, takes the actions the evaluator took in the
    slots that cell drove: every algorithm, self-play and mixed teams alike."""
    import alem_eval

    _, rec, _, teams = recorded
    policies = {c: alem_eval.load_policy(c, source=str(FIXTURES)) for c in MIXED_CELLS}
    for team in teams:
        names = tuple(MIXED_CELLS[m] for m in team)
        episodes = [rec.episode(names, e) for e in range(EPISODES)]
        length = max(len(ep["actions"]) for ep in episodes)

        obs = _padded([ep["observations"] for ep in episodes], length, 0.0).astype(np.float32)
        legal = _padded([ep["legal_actions"] for ep in episodes], length, True)
        for member in dict.fromkeys(names):
            policy = policies[member]
            carry, taken = policy.init(EPISODES), []
            for t in range(length):
                carry, actions = policy.act(carry, obs[:, t], legal[:, t])
                taken.append(np.asarray(actions))
            got = np.stack(taken, axis=1)  # [E, T, P]
            slots = [s for s, name in enumerate(names) if name == member]
            for e, ep in enumerate(episodes):
                n = len(ep["actions"])
                np.testing.assert_array_equal(
                    got[e, :n, slots], ep["actions"][:, slots].T, f"{member} in {names}, ep {e}"
                )


def _padded(arrays, length, fill):
    """``[E, length, ...]``: each episode's ``[T, ...]`` steps, then ``fill``."""
    out = np.full((len(arrays), length) + arrays[0].shape[1:], fill, arrays[0].dtype)
    for e, a in enumerate(arrays):
        out[e, : len(a)] = a
    return out


@PLAYS
def test_a_failing_recorder_stops_the_recording_not_the_scores(recorded):
    res, _, cells, teams = recorded
    broken = MemoryRecorder(fail_after=1)
    out = run_teams(
        [c.cfg for c in cells],
        [c.weights for c in cells],
        teams,
        **MIXED_RUN,
        record=RecordTo(broken, list(MIXED_CELLS)),
    )
    assert out.record_error == "disk full (test)"
    assert out.records == res.records
    assert broken.calls == 2  # nothing was attempted after the failure


@RECORD_CLI
def test_score_record_then_dataset_export_reads_back_with_flashbax(tmp_path, capsys):
    """The datasets issue's end-to-end path, through the commands: ``score --record``
    streams every step to disk, ``dataset export --format vault`` writes a Flashbax Vault,
    and flashbax's own ``Vault.read()`` returns every recorded step of every episode."""
    import json

    from flashbax.vault import Vault

    from alem_eval.cli.app import main
    from tests.conftest import FIXTURES

    def cli(*args: str) -> str:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out = capsys.readouterr()
        assert (exc.value.code or 0) == 0, out.err
        return out.out

    rec, vaults = tmp_path / "out", tmp_path / "vaults"
    scored = cli(
        # The in-process tests' episode count (their world programs: the persistent cache).
        *("score", IPPO, "--source", str(FIXTURES), "--episodes", str(EPISODES)),
        *("--max-steps", "30", "--results", str(tmp_path / "results")),
        *("--record", str(rec), "--format", "json"),
    )
    [cell] = json.loads(scored)
    lengths = [int(e["episode_length"]) for e in cell["episodes"]]
    printed = cli("dataset", "export", str(rec), "--format", "vault", "--out", str(vaults))
    [path] = [Path(line) for line in printed.split()]
    experience = (
        Vault(vault_name=path.parent.name, vault_uid=path.name, rel_dir=str(path.parent.parent))
        .read()
        .experience
    )
    actions = np.asarray(experience["actions"])
    assert actions.shape[:2] == (1, sum(lengths)) and actions.shape[2] == 3
    ends = np.asarray(experience["terminals"]) + np.asarray(experience["truncations"])
    assert np.flatnonzero(ends[0, :, 0]).tolist() == list(np.cumsum(lengths) - 1)
    card = json.loads((path / "card.json").read_text())
    assert card["episodes"] == EPISODES and card["steps"] == sum(lengths)


@RECORD_CLI
def test_recording_again_with_another_cap_replaces_the_episodes_and_says_so(tmp_path, capsys):
    """Cap 30, then cap 60 into one recording directory (the same compiled program): the
    episodes are recorded again at cap 60, one stderr line says why, and the recording
    holds every step scored (it used to keep the cap-30 episodes)."""
    import json

    from alem_eval.cli.app import main
    from alem_eval.datasets.reader import open_recording
    from tests.conftest import FIXTURES

    rec = tmp_path / "out"

    def score(cap: int) -> tuple[list[int], list[str]]:
        with pytest.raises(SystemExit) as exc:
            main(
                [
                    *("score", IPPO, "--source", str(FIXTURES), "--episodes", str(EPISODES)),
                    *("--max-steps", str(cap), "--results", str(tmp_path / "results")),
                    *("--record", str(rec), "--format", "json"),
                ]
            )
        out = capsys.readouterr()
        assert (exc.value.code or 0) == 0, out.err
        [cell] = json.loads(out.out)
        warned = [line for line in out.err.splitlines() if line.startswith("warning")]
        return [int(e["episode_length"]) for e in cell["episodes"]], warned

    _, warned = score(30)
    assert warned == []
    lengths, warned = score(60)
    assert warned == [
        f"warning {IPPO} (easy): {EPISODES} episodes recorded in {rec} differ: max_steps 30 "
        f"(now 60); recording {EPISODES} of them again"
    ]
    recording = open_recording(rec)
    assert recording.incomplete == ()
    assert sorted((ep.episode, ep.length) for ep in recording.complete) == list(enumerate(lengths))
    assert {ep.meta["max_steps"] for ep in recording.complete} == {60}
