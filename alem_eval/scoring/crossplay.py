"""Cross-play: checkpoints trained apart, put in one team, against their own self-play.

A team is a tuple of cell ids, one per agent slot (:class:`Team`). :func:`compositions`
draws the teams of a scheme from the selected cells, always with each cell's self-play
team (all slots the same cell):

* ``pairs``: every ordered pair (A, B), A != B, as "A in all slots but one, B in the
  remaining one", for every position of B: ``n (n - 1) S`` teams for n cells and S slots;
* ``distinct``: ordered teams of S different cells, a seeded sample of ``max_teams``
  (all of them when there are no more than that);
* ``mixed``: the ``distinct`` teams that span more than one algorithm (sampled alike);
* ``all``: the three together (each team once).

:func:`run_crossplay` scores every team in ONE :func:`alem_eval.evaluate.rollout.run_teams` call
(protocol ``fast``: episode i is world ``PRNGKey(9999 + i)`` for every team, so teams
are compared on the same worlds) and keeps the rows in a cross-play store of its own
(:class:`CrossplayStore`, ``<results>/crossplay/``), which a rerun reads back instead of
recomputing and which ``report`` / ``leaderboard`` never read.

The statistics (no JAX):

* the pair matrix (:func:`pair_matrix`): ``[A, B]`` = mean of a metric over the teams
  "A in S - 1 slots + B in one" (every position) and their episodes; the diagonal is
  self-play;
* the cross-play gap (:func:`~alem_eval.analysis.crossplay_stats.crossplay_gap`) = self - cross.
  A cross-play team T's self reference is the slot-weighted mean of its members' self-play
  (AAB: (2 SP_A + SP_B) / 3, episode by episode), so the gap is what the team loses by
  mixing beyond what its members score on their own; the estimate weighs every cross-play
  team the same (runs = ``teams``) or every (team, episode) (runs = ``episodes``). Its CI
  is a seeded bootstrap over the worlds: a replicate draws one multiset of episode indices
  and applies it to every team and to the self-play references alike
  (:mod:`alem_eval.analysis.crossplay_stats`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.analysis.crossplay_stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPS,
    METHOD,
    RUNS_MODES as RUNS_MODES,  # re-exported: the command's --runs choices
    GapEstimate,
    check_runs,
    crossplay_gap,
)
from alem_eval.core.errors import EvaluationError, UsageError, brief
from alem_eval.analysis.metrics import BASE, COORD, TOTAL, metric_info

SCHEMES: tuple[str, ...] = ("pairs", "distinct", "mixed", "all")
GAP_METRICS: tuple[str, ...] = (TOTAL, BASE, COORD)  # Total%, Base%, Coord%
MATRIX_METRIC = TOTAL
PROTOCOL = "fast"  # the only protocol that takes mixed teams
DEFAULT_MAX_TEAMS = 64
_GRID_LIMIT = 20_000_000  # n ** slots candidate rows enumerated for distinct / mixed


# ----------------------------------------------------------------------------------------
# Compositions
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Team:
    """Which cell drives each agent slot: ``slots[s]`` is a cell id."""

    slots: tuple[str, ...]

    @property
    def members(self) -> tuple[str, ...]:
        """The distinct cells, in slot order."""
        return tuple(dict.fromkeys(self.slots))

    @property
    def is_self_play(self) -> bool:
        return len(self.members) == 1

    @property
    def anchor(self) -> str:
        """The cell in most slots (A for AAB); on ties the first in slot order."""
        return max(self.members, key=self.slots.count)  # max keeps the first of equals

    @property
    def pair(self) -> tuple[str, str, int] | None:
        """``(A, B, position of B)`` for a team "A in all slots but one, B in one"; else None."""
        if len(self.members) != 2 or len(self.slots) < 3:
            return None
        a = self.anchor
        (b,) = [m for m in self.members if m != a]
        if self.slots.count(b) != 1:
            return None
        return a, b, self.slots.index(b)

    @property
    def shape(self) -> str:
        """``self`` | ``pair`` | ``distinct`` | ``other``."""
        if self.is_self_play:
            return "self"
        if self.pair is not None:
            return "pair"
        return "distinct" if len(self.members) == len(self.slots) else "other"

    def label(self) -> str:
        return " | ".join(self.slots)


def compositions(
    cells: Sequence[Any],
    scheme: str = "pairs",
    max_teams: int = DEFAULT_MAX_TEAMS,
    seed: int = 0,
    *,
    num_slots: int = 3,
) -> list[Team]:
    """The teams of ``scheme`` over ``cells`` (objects with ``.id`` and ``.algorithm``,
    e.g. manifest cells): each cell's self-play team first (in the given order), then the
    scheme's teams, each team once. ``max_teams`` caps the sampled schemes (``distinct``,
    ``mixed``; ``pairs`` is always complete); the same ``seed`` gives the same sample.
    Raises :class:`UsageError` when the cells cannot form a cross-play team of the scheme."""
    _check_scheme(scheme)
    _check_int("--max-teams", max_teams, 1)
    _check_int("--seed", seed, 0)
    _check_int("number of slots", num_slots, 2)
    cells = list({c.id: c for c in cells}.values())
    ids = [c.id for c in cells]
    if len(ids) < 2:
        raise UsageError(f"cross-play needs at least two cells, the selection has {len(ids)}")
    teams = [Team((c,) * num_slots) for c in ids]
    if scheme in ("pairs", "all"):
        teams += _pairs(ids, num_slots)
    for kind in ("distinct", "mixed"):
        if scheme in (kind, "all"):
            algorithms = [c.algorithm for c in cells]
            teams += _sample_distinct(
                ids,
                algorithms,
                num_slots,
                max_teams,
                _rng(seed, "compositions", kind),
                mixed=kind == "mixed",
                required=scheme == kind,
            )
    return list(dict.fromkeys(teams))


def _pairs(ids: Sequence[str], num_slots: int) -> list[Team]:
    teams = []
    for a, b in itertools.permutations(ids, 2):
        for pos in range(num_slots):
            slots = [a] * num_slots
            slots[pos] = b
            teams.append(Team(tuple(slots)))
    return teams


def _sample_distinct(
    ids: Sequence[str],
    algorithms: Sequence[str],
    num_slots: int,
    max_teams: int,
    rng: np.random.Generator,
    *,
    mixed: bool,
    required: bool,
) -> list[Team]:
    """Ordered teams of ``num_slots`` different cells (spanning more than one algorithm when
    ``mixed``): all of them when at most ``max_teams``, else a uniform sample without
    replacement, kept in lexicographic order of the cells' positions."""
    n = len(ids)
    name = "mixed" if mixed else "distinct"
    if n < num_slots:
        if not required:
            return []
        raise UsageError(
            f"scheme {name} needs at least {num_slots} cells (one per slot), the selection has {n}"
        )
    if n**num_slots > _GRID_LIMIT:
        raise UsageError(
            f"scheme {name}: {n} cells are too many to draw {num_slots}-slot "
            "teams from; select fewer cells"
        )
    grid = np.indices((n,) * num_slots, dtype=np.int32).reshape(num_slots, -1).T
    keep = np.ones(len(grid), bool)
    for i, j in itertools.combinations(range(num_slots), 2):
        keep &= grid[:, i] != grid[:, j]
    if mixed:
        codes = np.unique(np.asarray(algorithms), return_inverse=True)[1].reshape(-1)[grid]
        keep &= (codes != codes[:, :1]).any(axis=1)
    candidates = grid[keep]
    if len(candidates) == 0:
        if not required:
            return []
        raise UsageError(
            f"scheme {name} needs cells of at least two algorithms; the "
            f"selection has only {algorithms[0]}"
        )
    if len(candidates) > max_teams:
        candidates = candidates[np.sort(rng.choice(len(candidates), max_teams, replace=False))]
    return [Team(tuple(ids[k] for k in row)) for row in candidates]


# ----------------------------------------------------------------------------------------
# Statistics (numpy only)
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairMatrix:
    """``values[i, j]``: mean ``metric`` of the teams "cells[i] in all slots but one,
    cells[j] in the other" over every position and episode; the diagonal is self-play;
    NaN where no such team was scored. Rows: the partner A, columns: the newcomer B."""

    metric: str
    cells: tuple[str, ...]
    values: np.ndarray  # (n, n)

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "label": metric_info(self.metric).label,
            "rows": list(self.cells),
            "cols": list(self.cells),
            "values": [
                [None if not math.isfinite(v) else float(v) for v in row] for row in self.values
            ],
        }


def pair_matrix(
    cells: Sequence[str],
    scores: Mapping[Team, Sequence[float] | np.ndarray],
    metric: str = MATRIX_METRIC,
) -> PairMatrix:
    """The pair matrix of ``metric`` from ``{team: per-episode values}``."""
    index = {c: i for i, c in enumerate(cells)}
    pooled: dict[tuple[int, int], list[float]] = defaultdict(list)
    for team, v in scores.items():
        if team.is_self_play:
            a = b = team.slots[0]
        elif team.pair is not None:
            a, b, _ = team.pair
        else:
            continue
        if a in index and b in index:
            pooled[(index[a], index[b])].extend(float(x) for x in v)
    values = np.full((len(cells), len(cells)), np.nan)
    for (i, j), v in pooled.items():
        finite = [x for x in v if math.isfinite(x)]
        if finite:
            values[i, j] = float(np.mean(finite))
    return PairMatrix(metric, tuple(cells), values)


# ----------------------------------------------------------------------------------------
# The cross-play store: <results>/crossplay/<eval_difficulty>/<digest>.pq
# ----------------------------------------------------------------------------------------
class CrossplayStore:
    """Scored cross-play episodes as Parquet, one row per (team, episode).

    Columns: ``team_key`` (digest of the team's provenance, see :func:`team_key`),
    ``num_slots``, ``slot0 .. slot<S-1>`` (the cell id driving each agent slot),
    ``eval_difficulty, protocol, num_episodes, max_steps, episode, env_version,
    jax_version, alem_eval_version``, then every record key verbatim (``Team/*``,
    ``episode_return``, ...). Files end in ``.pq``, not ``.parquet``: the results store
    (``report``, ``leaderboard``) globs ``*.parquet`` and never sees them. Writes are
    atomic; unreadable files and incomplete teams are skipped with a warning.
    """

    SUFFIX = ".pq"

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def for_results(cls, results: str | Path | None = None) -> CrossplayStore:
        """The cross-play store beside the results store (``--results``, else the default)."""
        from alem_eval.analysis.results import default_results_dir

        base = Path(results).expanduser() if results else default_results_dir()
        return cls(base / "crossplay")

    def load(self, eval_difficulty: str) -> dict[str, list[dict[str, float]]]:
        """``{team_key: [episode records]}`` of every complete team stored for the difficulty."""
        import pandas as pd
        import pyarrow as pa

        from alem_eval.core.fsutil import TMP_PREFIX
        from alem_eval.analysis.results import ResultsWarning

        out: dict[str, list[dict[str, float]]] = {}
        folder = self.root / eval_difficulty
        if not folder.is_dir():
            return out
        for path in sorted(folder.glob("*" + self.SUFFIX)):
            if path.name.startswith(TMP_PREFIX):
                continue
            try:
                df = pd.read_parquet(path)
                metrics = [c for c in df.columns if not _is_id_column(c)]
                for key, rows in df.groupby("team_key", sort=False):
                    rows = rows.sort_values("episode")
                    n = int(rows["num_episodes"].iloc[0])
                    if key in out or rows["episode"].tolist() != list(range(n)):
                        continue
                    out[str(key)] = [
                        {c: float(r[c]) for c in metrics if pd.notna(r[c])}
                        for _, r in rows.iterrows()
                    ]
            except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
                warnings.warn(
                    f"skipping unreadable cross-play file {path}: {brief(exc, 400)}",
                    ResultsWarning,
                    stacklevel=2,
                )
        return out

    def write(self, rows: Sequence[Mapping[str, Any]], eval_difficulty: str) -> Path:
        """Store ``rows`` (see :func:`store_rows`) as one new file, atomically."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        from alem_eval.core.fsutil import TMP_PREFIX, atomic_write

        keys = sorted({str(r["team_key"]) for r in rows})
        digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
        table = pa.Table.from_pandas(pd.DataFrame(list(rows)), preserve_index=False)
        dest = self.root / eval_difficulty / f"{PROTOCOL}-{digest}{self.SUFFIX}"
        return atomic_write(
            dest,
            lambda fh: pq.write_table(table, fh, compression="zstd"),
            prefix=TMP_PREFIX,
            suffix=self.SUFFIX,
        )


_ID_COLUMNS = frozenset(
    {
        "team_key",
        "num_slots",
        "eval_difficulty",
        "protocol",
        "num_episodes",
        "max_steps",
        "episode",
        "env_version",
        "jax_version",
        "alem_eval_version",
    }
)


def _is_id_column(name: str) -> bool:
    return name in _ID_COLUMNS or (name.startswith("slot") and name[4:].isdigit())


@dataclass(frozen=True)
class CellKey:
    """What identifies a cell's play: its id and the provenance of its weights and config."""

    cell: str
    checkpoint_hash: str
    config_hash: str
    env_version: str | None


def team_key(
    team: Team,
    cells: Mapping[str, CellKey],
    *,
    eval_difficulty: str,
    num_episodes: int,
    max_steps: int,
) -> str:
    """16-hex-digit digest of everything that decides a team's records."""
    doc = {
        "slots": [
            [cells[c].cell, cells[c].checkpoint_hash, cells[c].config_hash, cells[c].env_version]
            for c in team.slots
        ],
        "eval_difficulty": eval_difficulty,
        "protocol": PROTOCOL,
        "num_episodes": num_episodes,
        "max_steps": max_steps,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def store_rows(
    team: Team,
    key: str,
    episodes: Sequence[Mapping[str, float]],
    *,
    eval_difficulty: str,
    num_episodes: int,
    max_steps: int,
    env_version: str | None,
) -> list[dict[str, Any]]:
    """The store rows of one scored team (one per episode)."""
    base = {
        "team_key": key,
        "num_slots": len(team.slots),
        **{f"slot{s}": c for s, c in enumerate(team.slots)},
        "eval_difficulty": eval_difficulty,
        "protocol": PROTOCOL,
        "num_episodes": num_episodes,
        "max_steps": max_steps,
        "env_version": env_version,
        "jax_version": _version("jax"),
        "alem_eval_version": _version("alem-eval"),
    }
    return [
        {**base, "episode": i, **{k: float(v) for k, v in ep.items()}}
        for i, ep in enumerate(episodes)
    ]


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeamScore:
    """One team's per-episode records (every ``run_teams`` key verbatim)."""

    team: Team
    key: str
    episodes: tuple[Mapping[str, float], ...]
    reused: bool

    def values(self, metric: str) -> np.ndarray:
        """``(episodes,)``; NaN where an episode lacks the metric."""
        return np.array([ep.get(metric, np.nan) for ep in self.episodes], dtype=float)

    def mean(self, metric: str) -> float | None:
        v = self.values(metric)
        v = v[np.isfinite(v)]
        return float(v.mean()) if len(v) else None

    def row(self) -> dict[str, Any]:
        """Flat per-team row: slots, shape, anchor, reused, episodes, metric means."""
        return {
            "team_key": self.key,
            **{f"slot{s}": c for s, c in enumerate(self.team.slots)},
            "shape": self.team.shape,
            "anchor": self.team.anchor,
            "reused": self.reused,
            "episodes": len(self.episodes),
            **{k: self.mean(k) for k in (*GAP_METRICS, "episode_return", "episode_length")},
        }


@dataclass(frozen=True)
class CrossplayResult:
    """Everything ``alem-eval crossplay`` reports (values are raw fractions)."""

    cells: tuple[str, ...]
    eval_difficulty: str
    scheme: str
    num_episodes: int
    max_steps: int
    teams: tuple[TeamScore, ...]
    matrix: PairMatrix
    gaps: tuple[GapEstimate, ...]
    bootstrap: Mapping[str, Any]  # reps, seed, confidence, runs, method
    store: Path | None

    @property
    def teams_scored(self) -> int:
        """Teams computed by this run (the rest were read back from the store)."""
        return sum(not t.reused for t in self.teams)

    @property
    def teams_reused(self) -> int:
        return sum(t.reused for t in self.teams)

    def as_json(self) -> dict[str, Any]:
        return {
            "eval_difficulty": self.eval_difficulty,
            "protocol": PROTOCOL,
            "scheme": self.scheme,
            "num_episodes": self.num_episodes,
            "max_steps": self.max_steps,
            "cells": list(self.cells),
            "teams_total": len(self.teams),
            "teams_scored": self.teams_scored,
            "teams_reused": self.teams_reused,
            "pair_matrix": self.matrix.as_json(),
            "gaps": [g.as_json() for g in self.gaps],
            "bootstrap": dict(self.bootstrap),
            "teams": [t.row() for t in self.teams],
            "store": str(self.store) if self.store is not None else None,
        }

    def team_rows(self) -> list[dict[str, Any]]:
        return [t.row() for t in self.teams]

    def gap_rows(self) -> list[dict[str, Any]]:
        """The human table: self, cross and gap [CI] in percent."""
        rows = []
        for g in self.gaps:
            info = metric_info(g.metric)
            k = info.scale
            gap = g.gap.scaled(k)
            rows.append(
                {
                    "metric": info.label,
                    "self-play": f"{g.self_score * k:.2f}",
                    "cross-play": f"{g.cross * k:.2f}",
                    "gap (self - cross)": gap.fmt(2)
                    if math.isfinite(gap.lo)
                    else f"{gap.point:.2f} [no CI]",
                    "teams": g.n_teams,
                    "runs": g.n_runs,
                    "worlds": g.n_worlds,
                }
            )
        return rows

    def matrix_rows(self) -> list[dict[str, Any]]:
        """The pair matrix for a human table (percent), row = partner A."""
        k = metric_info(self.matrix.metric).scale
        return [
            {
                "A (partner) \\ B (newcomer)": a,
                **{
                    b: (None if not math.isfinite(v) else round(v * k, 2))
                    for b, v in zip(self.cells, row, strict=True)
                },
            }
            for a, row in zip(self.cells, self.matrix.values, strict=True)
        ]


def run_crossplay(
    source,
    cells: Sequence[Any],
    *,
    scheme: str = "pairs",
    eval_difficulty: str | None = None,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    max_teams: int = DEFAULT_MAX_TEAMS,
    seed: int = 0,
    reps: int = DEFAULT_REPS,
    runs: str = "teams",
    confidence: float = DEFAULT_CONFIDENCE,
    store: CrossplayStore | None = None,
    on_env_mismatch: str = "error",
    on_progress: Callable[[str], None] | None = None,
) -> CrossplayResult:
    """Score the ``scheme``'s teams over ``cells`` (from ``source``) in one compiled rollout
    and compare cross-play with self-play.

    ``eval_difficulty`` defaults to the cells' training difficulty (they must share it).
    Teams already in ``store`` under the same provenance are read back, the others are
    scored in one :func:`~alem_eval.evaluate.rollout.run_teams` call, each written to the store as
    soon as its last episode ends (a run killed part-way keeps every team that finished),
    before any statistic is computed. Raises :class:`~alem_eval.core.errors.AlemEvalError` s,
    one line each, naming the cell: cells that cannot be resolved or loaded, cells that
    need different env configurations, bad options.
    """
    from alem_eval.evaluate.rollout import run_teams
    from alem_eval.evaluate.settings import (
        FAST_MAX_STEPS,
        FAST_NUM_EPISODES,
        check_env_version,
        eval_statics,
        validate_request,
    )
    from alem_eval.model.loader import resolve_cell

    note = on_progress or (lambda _m: None)
    _check_scheme(scheme)
    check_runs(runs)
    _check_int("--reps", reps, 1)
    cells = list({c.id: c for c in cells}.values())
    resolved = {c.id: _resolve(source, c, resolve_cell) for c in cells}
    eval_difficulty = eval_difficulty or _shared_difficulty(cells, resolved)
    validate_request(PROTOCOL, eval_difficulty, num_episodes, max_steps)
    num_episodes = num_episodes or FAST_NUM_EPISODES
    max_steps = max_steps or FAST_MAX_STEPS
    for c in cells:
        check_env_version(resolved[c.id][1], on_mismatch=on_env_mismatch, where=c.id)
    statics = {c.id: eval_statics(resolved[c.id][1]) for c in cells}
    _check_same_world(cells, statics)
    teams = compositions(cells, scheme, max_teams, seed, num_slots=statics[cells[0].id].num_agents)

    cell_keys = {c.id: _cell_key(c, *resolved[c.id][:2]) for c in cells}
    keys = {
        t: team_key(
            t,
            cell_keys,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
        )
        for t in teams
    }
    stored = store.load(eval_difficulty) if store is not None else {}
    todo = [t for t in teams if keys[t] not in stored]
    note(
        f"{len(teams)} teams on {eval_difficulty}: {len(teams) - len(todo)} read back from "
        f"the cross-play store, {len(todo)} to score"
    )

    def keep(team: Team, episodes: Sequence[Mapping[str, float]]) -> None:
        """A team whose episodes all ended: into the store at once, on its own."""
        if store is None:
            return
        rows = store_rows(
            team,
            keys[team],
            episodes,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
            env_version=cell_keys[team.slots[0]].env_version,
        )
        note(f"scored {team.label()}; stored in {store.write(rows, eval_difficulty)}")

    fresh = (
        _score(
            source,
            cells,
            todo,
            run_teams,
            keep,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
        )
        if todo
        else {}
    )
    scores = tuple(
        TeamScore(
            t, keys[t], tuple(fresh[t] if t in fresh else stored[keys[t]]), reused=t not in fresh
        )
        for t in teams
    )
    per_metric = {m: {s.team: s.values(m) for s in scores} for m in GAP_METRICS}
    gaps = tuple(
        crossplay_gap(
            per_metric[m], metric=m, runs=runs, reps=reps, seed=seed, confidence=confidence
        )
        for m in GAP_METRICS
    )
    ids = tuple(c.id for c in cells)
    return CrossplayResult(
        cells=ids,
        eval_difficulty=eval_difficulty,
        scheme=scheme,
        num_episodes=num_episodes,
        max_steps=max_steps,
        teams=scores,
        matrix=pair_matrix(ids, per_metric[MATRIX_METRIC]),
        gaps=gaps,
        bootstrap={
            "reps": reps,
            "seed": seed,
            "confidence": confidence,
            "runs": runs,
            "method": METHOD,
        },
        store=store.root if store is not None else None,
    )


def _resolve(source, cell, resolve_cell) -> tuple[Path, Any, Any]:
    """``(cell_dir, cfg, spec)`` of a cell; errors name the cell."""
    from alem_eval.core.errors import AlemEvalError, ConfigError

    cell_dir = source.local_dir(cell)
    try:
        cfg, spec = resolve_cell(
            cell_dir, algorithm=cell.algorithm, difficulty=cell.difficulty, seed=cell.seed
        )
    except AlemEvalError as exc:
        if cell.id in str(exc):
            raise
        raise ConfigError(f"{cell.id}: {exc}") from exc
    return cell_dir, cfg, spec


def _shared_difficulty(cells, resolved) -> str:
    found = {c.id: resolved[c.id][1].env.training_difficulty for c in cells}
    names = sorted(set(found.values()))
    if len(names) > 1:
        raise UsageError(
            f"the selected cells were trained on different difficulties "
            f"({', '.join(names)}); pass --eval-difficulty to play them together on one "
            "difficulty's worlds, or --difficulty to keep the cells of one"
        )
    return names[0]


def _check_same_world(cells, statics) -> None:
    first = cells[0]
    for c in cells[1:]:
        a, b = statics[first.id].world, statics[c.id].world
        if a != b:
            fields = [
                f
                for f in (
                    "env_name",
                    "num_agents",
                    "num_comm_channels",
                    "shared_reward",
                    "scale_base_difficulty",
                )
                if getattr(a, f) != getattr(b, f)
            ]
            detail = ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in fields)
            raise EvaluationError(
                f"{first.id} and {c.id} need different env configurations "
                f"({detail}); they cannot play in one team"
            )


def _cell_key(cell, cell_dir: Path, cfg) -> CellKey:
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.model.loader import cell_checkpoint_dir

    return CellKey(
        cell.id, checkpoint_hash(cell_checkpoint_dir(cell_dir)), cfg.config_hash, cfg.env_version
    )


def _score(
    source,
    cells,
    teams: Sequence[Team],
    run_teams,
    on_team: Callable[[Team, list[dict[str, float]]], None],
    *,
    eval_difficulty: str,
    num_episodes: int,
    max_steps: int,
) -> dict[Team, list[dict[str, float]]]:
    """Load the cells the teams use and score every team in one ``run_teams`` call;
    ``on_team(team, records)`` as each team's last episode ends."""
    from alem_eval.model.loader import load_cell

    used = [c for c in cells if any(c.id in t.slots for t in teams)]
    loaded = [
        load_cell(
            source.local_dir(c),
            algorithm=c.algorithm,
            difficulty=c.difficulty,
            seed=c.seed,
            policy_only=True,
            where=c.id,
        )
        for c in used
    ]
    index = {c.id: i for i, c in enumerate(used)}
    result = run_teams(
        [lc.cfg for lc in loaded],
        [lc.weights for lc in loaded],
        [tuple(index[c] for c in t.slots) for t in teams],
        protocol=PROTOCOL,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch="ignore",  # checked per cell
        on_team=lambda i, records: on_team(teams[i], records),
    )
    return {t: list(recs) for t, recs in zip(teams, result.records, strict=True)}


# ----------------------------------------------------------------------------------------
# Outputs: crossplay.json, teams.csv, pair_matrix.{png,pdf}
# ----------------------------------------------------------------------------------------
FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf")


def write_outputs(result: CrossplayResult, out_dir: str | Path) -> list[Path]:
    """Write the heatmap of the pair matrix (PNG + PDF), ``teams.csv`` (one row per team)
    and ``crossplay.json`` (:meth:`CrossplayResult.as_json` plus ``outputs``); returns the
    paths written, the JSON last."""
    import csv
    import io

    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.core.jsonout import json_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = save_figure(plot_pair_matrix(result), out / "pair_matrix")
    rows = result.team_rows()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
    writer.writeheader()
    writer.writerows(rows)
    paths.append(write_text_atomic(out / "teams.csv", buf.getvalue()))
    doc = {**result.as_json(), "outputs": [str(p) for p in paths]}
    paths.append(write_text_atomic(out / "crossplay.json", json_text(doc) + "\n"))
    return paths


def plot_pair_matrix(result: CrossplayResult):
    """Heatmap of the pair matrix on the display scale (a :class:`matplotlib.figure.Figure`
    on an Agg canvas); missing entries are grey."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = result.matrix
    info = metric_info(m.metric)
    n = len(m.cells)
    prefix, labels = _short_labels(m.cells)
    size = min(14.0, 2.5 + 0.55 * n)
    fig = Figure(figsize=(size + 1.5, size), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    data = np.ma.masked_invalid(m.values * info.scale)
    im = ax.imshow(data, cmap=cmap, aspect="equal")
    fig.colorbar(im, ax=ax, label=info.label, shrink=0.8)
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_xlabel("newcomer B (1 agent)")
    ax.set_ylabel(f"partner A ({_num_slots(result) - 1} agents)")
    ax.set_title(
        f"Cross-play {info.label} on {result.eval_difficulty} (diagonal: self-play)"
        + (f"\ncells {prefix}/..." if prefix else ""),
        fontsize=10,
    )
    if n <= 16:
        finite = data.compressed()
        mid = float(finite.mean()) if finite.size else 0.0
        for i in range(n):
            for j in range(n):
                if not np.ma.is_masked(data[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{data[i, j]:.3g}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="black" if data[i, j] > mid else "white",
                    )
    return fig


def save_figure(fig, base: Path, formats: Sequence[str] = FIGURE_FORMATS) -> list[Path]:
    """``base.<fmt>`` for each format (PDFs without a creation date: reproducible bytes)."""
    out = []
    for fmt in formats:
        path = base.with_suffix(f".{fmt}")
        fig.savefig(
            path,
            format=fmt,
            bbox_inches="tight",
            dpi=150,
            metadata={"CreationDate": None} if fmt == "pdf" else {},
        )
        out.append(path)
    return out


def _num_slots(result: CrossplayResult) -> int:
    return len(result.teams[0].team.slots) if result.teams else 3


def _short_labels(ids: Sequence[str]) -> tuple[str, list[str]]:
    """Drop the leading id components every cell shares: ``("tiny/ippo-rnn", ["easy/seed0",
    ...])``."""
    parts = [i.split("/") for i in ids]
    k = 0
    while all(len(p) > k + 1 and p[k] == parts[0][k] for p in parts):
        k += 1
    return "/".join(parts[0][:k]), ["/".join(p[k:]) for p in parts]


# ----------------------------------------------------------------------------------------
# Validation and seeding
# ----------------------------------------------------------------------------------------
def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise UsageError(f"unknown scheme {scheme!r}: --scheme must be one of {', '.join(SCHEMES)}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise UsageError(f"{name} must be an integer of at least {minimum}, got {value!r}")


def _rng(seed: int, *stream: Any) -> np.random.Generator:
    """A generator for ``(seed, stream)``: independent streams from one user seed."""
    from alem_eval.analysis.bootstrap import stream_rng

    return stream_rng(seed, stream)
