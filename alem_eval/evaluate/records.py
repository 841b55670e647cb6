"""Per-episode records from the output buffer, and the recording of every step.

Per-episode records carry every ``compute_score`` key verbatim, reduced like upstream's
``_flatten_user_info_prefix`` (``float(jnp.array(v).mean())`` of each ``[P]`` value,
NaN/inf dropped; see :func:`alem_eval.envs.eval_env.upstream_mean`), plus
``episode_return`` (float64 running sum of the per-step float32 mean-over-agents reward, in
step order, exactly like upstream's Python accumulation), ``episode_length`` (the TRUE
number of steps; upstream logs length - 1) and ``terminated`` (1.0 if the env ended the
episode before the cap). ``fast`` scores the terminal states with the world's compiled
score program, ``reference`` eagerly, as upstream does.

With :class:`RecordTo`, :class:`RecordSink` hands a recorder every evaluated step, from the
:class:`~alem_eval.evaluate.machine.StepLog` of each compiled call; with ``states`` also the
env state after each step (one step per call: ``render`` draws the frames from them).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import AlemEvalError
from alem_eval.evaluate.machine import EpisodeResult, StepLog
from alem_eval.evaluate.programs import Program, terminal_state, world_programs


@dataclass(frozen=True)
class RecordTo:
    """Where :func:`run_teams` streams every evaluated step (``score --record``)."""

    recorder: Any  # alem_eval.datasets.recorder.Recorder
    names: Sequence[str]  # per checkpoint index: the cell id recorded for its agent slots
    # Also each step's env state: the run plays one team on one batch slot, one step per
    # compiled call, and every ``add_steps`` (one step) gets ``state`` (the slot's env
    # state after the step, unbatched, on the device), ``team_reward``, ``last`` and
    # ``terminated`` besides the recorded fields (``render``'s frames).
    states: bool = False


class RecordSink:
    """Turns the per-call :class:`StepLog` of one batch into the recorder's calls: a
    slot's live rows in one call are consecutive steps of one or more episodes (a slot
    takes its next episode right after one ends); an episode's last row finishes it. A
    recorder error (unwritable or full disk) stops the recording, never the evaluation:
    it is kept in :attr:`error`."""

    FIELDS = ("observations", "legal_actions", "actions", "rewards", "dones", "team_achievements")
    STATE_FIELDS = ("team_reward", "last", "terminated")  # besides the state (RecordTo.states)

    def __init__(self, target: RecordTo, prog: Program, teams, world_keys, num_episodes: int):
        """``teams[j]``: batch row ``j``'s team, None for a padding team (never recorded)."""
        self.recorder = target.recorder
        self.states = target.states
        self.team_names = [
            None if team is None else tuple(target.names[m] for m in team) for team in teams
        ]
        self.prog = prog
        self.world_keys = np.asarray(world_keys, np.uint32)
        self.num_episodes = num_episodes
        self.open: dict[tuple[int, int], dict[str, Any]] = {}
        self.error: str | None = None
        self.state: Any = None

    def __call__(self, log: StepLog, state: Any = None) -> None:
        """One call's log (host arrays); ``state``: with :attr:`RecordTo.states`, the env
        state of the run's one slot after the call's one step."""
        if self.error is not None:
            return
        key = self.prog.key
        per_device = key.num_devices > 1
        self.state = state
        try:
            for d in range(key.num_devices):
                view = jax.tree_util.tree_map(lambda x, d=d: x[d], log) if per_device else log
                self._device(view, d)
        except AlemEvalError as exc:
            self.error = str(exc)

    def _device(self, log: StepLog, d: int) -> None:
        key = self.prog.key
        local_teams = sum(c.size for c in self.prog.classes)
        local_episodes = self.world_keys.shape[0] // (
            1 if key.protocol == "reference" else key.num_devices
        )
        for n in range(log.live.shape[1]):
            live = np.nonzero(log.live[:, n])[0]
            # Split the slot's live rows where its episode changes: one run per episode.
            cuts = np.nonzero(np.diff(log.episode[live, n]))[0] + 1
            for rows in np.split(live, cuts) if live.size else ():
                team = n // key.slots + (d * local_teams if key.protocol == "reference" else 0)
                episode = int(log.episode[rows[0], n]) + (
                    d * local_episodes if key.protocol == "fast" else 0
                )
                names = self.team_names[team] if team < len(self.team_names) else None
                if names is not None and episode < self.num_episodes:  # else padding
                    self._run(log, n, rows, team, names, episode)

    def _run(
        self, log: StepLog, n: int, rows: np.ndarray, team: int, names: tuple, episode: int
    ) -> None:
        """Hand the recorder consecutive rows of one episode of slot ``n``."""
        t0 = int(log.t[rows[0], n])
        acc = self.open.setdefault((team, episode), {"return": [], "step_key": None})
        if t0 == 0:
            acc.update(steps=[], step_key=[int(x) for x in log.key[rows[0], n]])
        acc["return"].append(np.asarray(log.team_reward[rows, n], np.float64))
        arrays = {f: getattr(log, f)[rows, n] for f in self.FIELDS}
        if self.states:  # (one slot, one step per call: the state after this row's step)
            arrays.update({f: getattr(log, f)[rows, n] for f in self.STATE_FIELDS})
            arrays["state"] = self.state
        self.recorder.add_steps(names, episode, t0, arrays)
        last = rows[-1]
        if bool(log.last[last, n]):
            del self.open[(team, episode)]
            steps = np.concatenate(acc["return"])
            self.recorder.finish_episode(
                names,
                episode,
                {
                    "length": int(log.t[last, n]) + 1,
                    "terminated": bool(log.terminated[last, n]),
                    "episode_return": float(np.add.accumulate(steps)[-1]),
                    "final_achievements": int(log.team_achievements[last, n]),
                    "world_key": [int(x) for x in self.world_keys[episode]],
                    "step_key": acc["step_key"],
                },
            )


def team_records(
    protocol: str, world, res: EpisodeResult, template: Any, rows: Sequence[int]
) -> list[list[dict[str, float]]]:
    """Records of the teams in ``rows`` of a ``[T, E]`` output buffer. ``fast`` scores the
    whole buffer with its one compiled score program (the same numbers whichever rows are
    asked for); ``reference`` scores each asked terminal state eagerly. Only the asked
    rows leave the device (with padding, see :func:`_row_pick`)."""
    n, pick = len(rows), _row_pick(rows, res.length.shape[0])

    def picked(tree):  # gathered on the device, the padding dropped on the host
        got = jax.device_get(_rows(tree, pick))
        return jax.tree_util.tree_map(lambda x: np.asarray(x)[:n], got)

    if protocol == "reference":
        scores = _scores_eager(world, picked(res.snapshot), template, n, res.length.shape[1])
    else:
        every = _scores(world, res.snapshot, template, *res.length.shape)
        scores = {name: v[np.asarray(rows)] for name, v in every.items()}
    return _records(picked(res._replace(snapshot=())), scores)


def _pow2_at_least(n: int) -> int:
    """The smallest power of two >= n, for n >= 1: the sizes compiled programs are
    padded to, so few of them ever compile."""
    return 1 << max(0, (n - 1).bit_length())


def _row_pick(rows: Sequence[int], total: int) -> np.ndarray:
    """``rows`` padded (repeating the last) to the next power of two, at most ``total``.
    Each length of a device gather compiles its own program (slow on a GPU), and teams
    hand over in groups of any size: padded, a run of ``T`` teams compiles at most
    ``log2(T) + 1`` of them per leaf, and moves at most twice the rows asked for."""
    size = min(total, _pow2_at_least(len(rows)))
    return np.asarray([*rows, *[rows[-1]] * (size - len(rows))], dtype=np.int32)


def _records(res: EpisodeResult, scores: Mapping[str, np.ndarray]) -> list[list[dict[str, float]]]:
    """Host-side per-episode records from [K, E]-leading result arrays."""
    from alem_eval.envs.eval_env import upstream_mean

    k, e = res.length.shape
    out = []
    for i in range(k):
        row = []
        for j in range(e):
            rec: dict[str, float] = {}
            for name, v in scores.items():
                x = upstream_mean(v[i, j])
                if math.isfinite(x):  # upstream drops NaN and inf
                    rec[name] = x
            n = int(res.length[i, j])
            # Upstream adds float(float32 step mean) to a Python float, step by step.
            steps = res.rewards[i, j, :n].astype(np.float64)
            rec["episode_return"] = float(np.add.accumulate(steps)[-1]) if n else 0.0
            rec["episode_length"] = float(n)
            rec["terminated"] = 1.0 if bool(res.terminated[i, j]) else 0.0
            row.append(rec)
        out.append(row)
    return out


# Array plumbing, jitted as a whole (as group._stacked: eagerly, each leaf of the Alem
# state would compile its own tiny program).
@jax.jit
def _rows(tree: Any, pick: jax.Array) -> Any:
    """Rows ``pick`` of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[pick], tree)


@functools.partial(jax.jit, static_argnums=1)
def _flat_padded(snapshot: tuple, padded: int) -> tuple:
    """``[K, E, ...]`` leaves as ``[padded, ...]``: K*E rows, then copies of the first."""

    def flat(x):
        x = x.reshape((-1,) + x.shape[2:])
        n = x.shape[0]
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - n,) + x.shape[1:])])

    return tuple(flat(x) for x in snapshot)


def _scores(world, snapshot: tuple, template: Any, k: int, e: int) -> dict[str, np.ndarray]:
    """compute_score of every terminal state (``snapshot`` leaves with ``[K, E]`` leading
    axes over the ``template`` state's other leaves) -> host ``[K, E, ...]``."""
    _, score = world_programs(world)
    n = k * e
    out = jax.device_get(score(_flat_padded(tuple(snapshot), _pow2_at_least(n)), template))
    return {name: np.asarray(v)[:n].reshape((k, e) + np.shape(v)[1:]) for name, v in out.items()}


def _scores_eager(world, snapshot: tuple, template: Any, k: int, e: int) -> dict[str, np.ndarray]:
    """As :func:`_scores`, but ``compute_score`` runs eagerly on each terminal state, as
    upstream's evaluation runs it: inside a compiled program XLA rewrites divisions by
    constants (``x / 376.0`` -> ``x * (1 / 376.0)``), which changes the last bit of the
    reward percentages for 162 of the 377 possible numerators. ``reference`` uses this."""
    from alem_eval.envs.eval_env import get_eval_env

    env = get_eval_env(world)
    host = [np.asarray(x) for x in snapshot]
    idx = env.score_leaf_indices(template)
    out: dict[str, list[np.ndarray]] = {}
    with jax.disable_jit():
        for i in range(k):
            for j in range(e):
                state = terminal_state(template, [jnp.asarray(x[i, j]) for x in host], idx)
                for name, v in env.score(state).items():
                    out.setdefault(name, []).append(np.asarray(v))
    return {name: np.stack(vs).reshape((k, e) + vs[0].shape) for name, vs in out.items()}


def upstream_view(record: Mapping[str, float], episode: int) -> dict[str, float]:
    """A record as upstream logs it per episode (``eval_ep/<difficulty>/...`` suffixes):
    ``episode_length`` = true length - 1, ``done``, ``seed`` = the episode index."""
    out = {
        k: v
        for k, v in record.items()
        if k not in ("episode_length", "terminated", "episode_return")
    }
    out["episode_return"] = record["episode_return"]
    out["episode_length"] = record["episode_length"] - 1
    out["done"] = record["terminated"]
    out["seed"] = episode
    return out
