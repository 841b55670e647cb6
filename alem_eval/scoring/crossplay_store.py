"""The cross-play store: ``<results>/crossplay/<eval_difficulty>/<digest>.pq``.

Scored cross-play episodes as Parquet, one row per (team, episode), keyed by a digest of
the team's provenance (:func:`team_key` over each slot's :class:`CellKey`): a rerun of
:func:`alem_eval.scoring.crossplay.run_crossplay` reads back every team stored under the
same key instead of scoring it again. ``report`` and ``leaderboard`` never read it (the
files end in ``.pq``, the results store globs ``*.parquet``).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alem_eval.core.errors import brief
from alem_eval.scoring.teams import PROTOCOL, Team


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
