"""Score cells end to end: materialise -> resolve -> group into stacks -> evaluate -> store.

This is the library behind ``alem-eval score``. Cells whose networks share shapes are
stacked and evaluated in one compiled, batched call (:func:`alem_eval.evaluate.score_stack`);
every finished cell is written to the results store at once (atomically), so an
interrupted run resumes with the cells that are missing, and a cell already scored under
the same provenance is read back instead of recomputed.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import UsageError

PROTOCOLS = ("fast", "reference")
# The paper protocol (EVALUATION.md): 20 episodes, at most 10000 steps.
PAPER_EPISODES = 20
PAPER_MAX_STEPS = 10_000
HEADLINE = (
    ("Total%", "Team/reward_pct_of_max", 100.0),
    ("Base%", "Team/normal_reward_pct_of_max", 100.0),
    ("Coord%", "Team/coord_reward_pct_of_max", 100.0),
    ("Achv", "Team/achievement_pct", 1.0),
)


@dataclass(frozen=True)
class ScoreOptions:
    protocol: str = "fast"
    num_episodes: int | None = None  # None: the protocol's default
    max_steps: int | None = None
    eval_difficulties: tuple[str, ...] | None = None  # report filter (never changes keys)
    max_stack: int = 5
    on_env_mismatch: str = "error"  # error | warn

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"unknown protocol {self.protocol!r}; choose one of {', '.join(PROTOCOLS)}")
        if self.num_episodes is not None and self.num_episodes < 1:
            raise UsageError(f"--episodes must be at least 1 (got {self.num_episodes})")
        if self.max_steps is not None and self.max_steps < 1:
            raise UsageError(f"--max-steps must be at least 1 (got {self.max_steps})")
        if self.max_stack < 1:
            raise UsageError(f"--stack must be at least 1 (got {self.max_stack})")
        if self.on_env_mismatch not in ("error", "warn"):
            raise UsageError("--on-env-mismatch must be 'error' or 'warn'")


@dataclass(frozen=True)
class CellScore:
    """One cell scored on one eval difficulty."""

    cell: Any  # manifest Cell
    eval_difficulty: str
    protocol: str
    episodes: tuple[Mapping[str, float], ...]
    reused: bool = False
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def aggregate(self) -> dict[str, float]:
        return aggregate_episodes(self.episodes)

    def as_record(self) -> dict[str, Any]:
        c = self.cell
        return {"cell": c.id, "budget": c.budget, "algorithm": c.algorithm,
                "difficulty": c.difficulty, "eval_difficulty": self.eval_difficulty,
                "seed": c.seed, "protocol": self.protocol,
                "episodes": [dict(e) for e in self.episodes], "aggregate": self.aggregate}

    def summary_row(self) -> dict[str, Any]:
        agg = self.aggregate
        row = {"cell": self.cell.id, "eval": self.eval_difficulty, "n": len(self.episodes)}
        for label, key, scale in HEADLINE:
            m, se = agg.get(key), agg.get(f"{key}_se", 0.0)
            row[label] = None if m is None else f"{m * scale:.2f} ± {se * scale:.2f}" \
                if scale != 1.0 else f"{m:.4f} ± {se:.4f}"
        row["len"] = agg.get("episode_length")
        row["reused"] = "yes" if self.reused else ""
        return row


def aggregate_episodes(episodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean of every key over the episodes that have it, plus ``<key>_se`` (population std /
    sqrt(n), as upstream logs it) when n > 1; non-finite values are left out."""
    values: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        for k, v in ep.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                values[k].append(float(v))
    out: dict[str, float] = {}
    for k, vs in values.items():
        n = len(vs)
        mean = math.fsum(vs) / n
        out[k] = mean
        if n > 1:
            var = math.fsum((v - mean) ** 2 for v in vs) / n
            out[f"{k}_se"] = math.sqrt(var) / math.sqrt(n)
    return out


@dataclass
class _Job:
    cell: Any
    cell_dir: Any
    cfg: Any
    spec: Any
    eval_difficulty: str
    num_episodes: int
    max_steps: int
    key: Any = None


def _plan(source, cells, opts: ScoreOptions) -> list[_Job]:
    from .loader import resolve_cell

    jobs = []
    for cell in cells:
        cell_dir = source.local_dir(cell)
        cfg, spec = resolve_cell(cell_dir, algorithm=cell.algorithm, difficulty=cell.difficulty,
                                 seed=cell.seed)
        if opts.protocol == "reference":
            diffs = list(dict.fromkeys(cfg.eval.eval_difficulties))
            n_ep = opts.num_episodes or cfg.eval.num_episodes
            steps = opts.max_steps or cfg.eval.max_steps
        else:
            diffs = [cfg.env.training_difficulty]
            n_ep = opts.num_episodes or PAPER_EPISODES
            steps = opts.max_steps or PAPER_MAX_STEPS
        if opts.eval_difficulties:
            diffs = [d for d in diffs if d in opts.eval_difficulties]
        for d in diffs:
            jobs.append(_Job(cell, cell_dir, cfg, spec, d, n_ep, steps))
    return jobs


def score_cells(
    source,
    cells: Sequence[Any],
    *,
    options: ScoreOptions = ScoreOptions(),
    store=None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> list[CellScore]:
    """Score ``cells`` from ``source``; results are read from / written to ``store``.

    ``on_progress(message, done, total)`` is called as cells complete.
    """
    from . import checkpoint as ckpt
    from .evaluate import check_env_version, score_stack
    from .loader import load_cell
    from .results import ResultKey, build_rows

    if hasattr(source, "pull") and getattr(source, "is_remote", False):
        source.pull(cells)
    jobs = _plan(source, cells, options)
    total = len(jobs)
    for job in {id(j.cfg): j for j in jobs}.values():
        check_env_version(job.cfg, on_mismatch=options.on_env_mismatch, where=job.cell.id)

    hashes: dict[str, str] = {}
    done: dict[tuple[str, str], CellScore] = {}
    todo: list[_Job] = []
    for job in jobs:
        if job.cell.id not in hashes:
            hashes[job.cell.id] = ckpt.checkpoint_hash(job.cell_dir / "checkpoint")
        job.key = ResultKey(cell=job.cell.id, eval_difficulty=job.eval_difficulty,
                            protocol=options.protocol, checkpoint_hash=hashes[job.cell.id],
                            config_hash=job.cfg.config_hash, env_version=job.cfg.env_version,
                            num_episodes=job.num_episodes, max_steps=job.max_steps)
        stored = store.get(job.key) if store is not None else None
        if stored is not None:
            done[(job.cell.id, job.eval_difficulty)] = _from_frame(job, stored, options.protocol)
        else:
            todo.append(job)
    if on_progress:
        on_progress("reused from the results store", len(done), total)

    groups: dict[tuple, list[_Job]] = defaultdict(list)
    for job in todo:
        groups[(job.cfg.network_key, job.eval_difficulty, job.num_episodes, job.max_steps)].append(job)
    for group in groups.values():
        size = min(options.max_stack, len(group))
        for start in range(0, len(group), size):
            stack = group[start:start + size]
            loaded = [load_cell(j.cell_dir, algorithm=j.cell.algorithm, difficulty=j.cell.difficulty,
                                seed=j.cell.seed, policy_only=True, where=j.cell.id) for j in stack]
            # Pad a short final stack with repeats so one compilation serves the group.
            pad = size - len(stack)
            cfgs = [l.cfg for l in loaded] + [loaded[-1].cfg] * pad
            weights = [l.weights for l in loaded] + [loaded[-1].weights] * pad
            records = score_stack(cfgs, weights, protocol=options.protocol,
                                  eval_difficulty=stack[0].eval_difficulty,
                                  num_episodes=stack[0].num_episodes, max_steps=stack[0].max_steps)
            for job, episodes in zip(stack, records):
                if store is not None:
                    store.write(build_rows(job.key, episodes), job.key,
                                extra={"num_params": job.spec.num_params()})
                done[(job.cell.id, job.eval_difficulty)] = CellScore(
                    job.cell, job.eval_difficulty, options.protocol, tuple(episodes),
                    provenance=_provenance(job.key))
            if on_progress:
                on_progress(f"scored {', '.join(j.cell.id for j in stack)}", len(done), total)
    return [done[(j.cell.id, j.eval_difficulty)] for j in jobs]


def _provenance(key) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(key)


def _from_frame(job: _Job, frame, protocol: str) -> CellScore:
    from .results import NON_METRIC_COLUMNS

    metric_cols = [c for c in frame.columns if c not in NON_METRIC_COLUMNS]
    frame = frame.sort_values("episode")
    episodes = tuple({c: float(r[c]) for c in metric_cols if r[c] == r[c]}
                     for _, r in frame.iterrows())
    return CellScore(job.cell, job.eval_difficulty, protocol, episodes, reused=True,
                     provenance=_provenance(job.key))
