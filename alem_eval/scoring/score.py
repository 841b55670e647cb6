"""Score cells end to end: the self-play way of playing (materialise -> resolve -> keys ->
the one orchestration, :mod:`alem_eval.scoring.orchestration`).

This is the library behind ``alem-eval score``: each cell's self-play team on each eval
difficulty is a match keyed by the cell's own result key; the orchestration stacks them
(any algorithms, any difficulties: one compiled program), plays them, and writes every
finished cell to the results store at once (atomically), so an interrupted run resumes
with the cells that are missing, and a cell already scored under the same provenance is
read back instead of recomputed.
"""

from __future__ import annotations

import math
from pathlib import Path
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping, Sequence

from alem_eval.core.errors import UsageError
from alem_eval.analysis.metrics import SUMMARY_METRICS, metric_info, units_fields
from alem_eval.scoring.orchestration import RecordingWarning as RecordingWarning

if TYPE_CHECKING:
    from alem_eval.evaluate.rollout import RolloutProgress
    from alem_eval.scoring.orchestration import Sink


@dataclass(frozen=True)
class ScoreOptions:
    """How to score: validated with the evaluator's own checks (one wording)."""

    protocol: str = "fast"  # evaluate.settings.PROTOCOLS
    num_episodes: int | None = None  # None: the protocol's default
    max_steps: int | None = None
    # The worlds every cell plays on; None: each cell's own (fast: its training
    # difficulty; reference: the EVAL_DIFFICULTIES its run evaluated). Part of every key.
    eval_difficulty: str | None = None
    max_stack: int = 5
    batch: int | None = None  # evaluator batch slots (None: settings.slots_per_team's default)
    on_env_mismatch: str = "error"  # evaluate.settings.ENV_MISMATCH_POLICIES: error | warn | ignore

    def __post_init__(self) -> None:
        from alem_eval.evaluate.settings import (
            ENV_MISMATCH_POLICIES,
            check_eval_difficulty,
            check_settings,
        )

        # The evaluator's own checks of protocol, --episodes, --max-steps and --batch.
        check_settings(self.protocol, self.num_episodes, self.max_steps, self.batch)
        if self.eval_difficulty is not None:
            check_eval_difficulty(self.eval_difficulty)
        if (
            isinstance(self.max_stack, bool)
            or not isinstance(self.max_stack, int)
            or self.max_stack < 1
        ):
            raise UsageError(f"--stack must be at least 1, got {self.max_stack!r}")
        if self.on_env_mismatch not in ENV_MISMATCH_POLICIES:
            raise UsageError(
                f"unknown env-version policy {self.on_env_mismatch!r} "
                f"(expected one of {', '.join(ENV_MISMATCH_POLICIES)})"
            )


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
        return {
            **units_fields(),
            "cell": c.id,
            "budget": c.budget,
            "algorithm": c.algorithm,
            "difficulty": c.difficulty,
            "eval_difficulty": self.eval_difficulty,
            "seed": c.seed,
            "protocol": self.protocol,
            "episodes": [dict(e) for e in self.episodes],
            "aggregate": self.aggregate,
        }

    def summary_row(self) -> dict[str, Any]:
        """The human table's row: mean ± s.e. of the summary metrics (display scale)."""
        agg = self.aggregate
        row = {"cell": self.cell.id, "eval": self.eval_difficulty, "n": len(self.episodes)}
        for key in SUMMARY_METRICS:
            info = metric_info(key)
            row[info.label] = info.format_mean_se(agg.get(key), agg.get(f"{key}_se"))
        row["len"] = agg.get("episode_length")
        row["reused"] = "yes" if self.reused else ""
        return row


def episode_rows(scores: Sequence[CellScore]) -> list[dict[str, Any]]:
    """One flat row per (cell, eval difficulty, episode): ``cell, eval_difficulty,
    protocol, episode`` and the episode's metrics verbatim (``score --format csv``)."""
    return [
        {
            "cell": s.cell.id,
            "eval_difficulty": s.eval_difficulty,
            "protocol": s.protocol,
            "episode": i,
            **ep,
        }
        for s in scores
        for i, ep in enumerate(s.episodes)
    ]


def score_digests(scores: Sequence[CellScore], store) -> Any:
    """The :class:`~alem_eval.analysis.digests.Digests` of ``scores`` as ``store`` keeps
    them (one cell-difficulty's with a one-element ``scores``); None when none of them
    names a stored file (no provenance)."""
    from alem_eval.analysis.digests import store_digests
    from alem_eval.analysis.result_keys import ResultKey

    keys = [ResultKey(**s.provenance) for s in scores if s.provenance]
    return store_digests(store, keys, {"command": "score"}) if keys else None


def records_with_digests(scores: Sequence[CellScore], store) -> list[dict[str, Any]]:
    """``as_record()`` of every score with the ``digests`` of its results file
    (``score --format json``); None for a score that names no stored file (no provenance)."""
    return [
        {
            **s.as_record(),
            "digests": d.as_json() if (d := score_digests([s], store)) is not None else None,
        }
        for s in scores
    ]


def env_steps(scores: Sequence[CellScore]) -> float:
    """Env steps actually run for ``scores`` (cells read back from the store count 0)."""
    return sum(ep.get("episode_length", 0) for s in scores if not s.reused for ep in s.episodes)


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


def score_settings(cfg, opts: ScoreOptions) -> tuple[list[str], int, int]:
    """``(eval difficulties, episodes, step cap)`` a cell of config ``cfg`` is scored
    with (``score`` and its ``--dry-run`` plan alike)."""
    from alem_eval.evaluate.settings import episode_settings

    if opts.eval_difficulty is not None:
        diffs = [opts.eval_difficulty]
    elif opts.protocol == "reference":
        diffs = list(dict.fromkeys(cfg.eval.eval_difficulties))
    else:
        diffs = [cfg.env.training_difficulty]
    n_ep, steps = episode_settings(cfg, opts.protocol, opts.num_episodes, opts.max_steps)
    return diffs, n_ep, steps


def _plan(source, cells, opts: ScoreOptions) -> list[_Job]:
    from alem_eval.model.loader import resolve_cell

    jobs = []
    for cell in cells:
        cell_dir = source.local_dir(cell)
        cfg, spec = resolve_cell(
            cell_dir, algorithm=cell.algorithm, difficulty=cell.difficulty, seed=cell.seed
        )
        diffs, n_ep, steps = score_settings(cfg, opts)
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
    on_episodes: Callable[[RolloutProgress], None] | None = None,
    record_dir: Path | None = None,
    sinks: Sequence[Sink] = (),
) -> list[CellScore]:
    """Score ``cells`` from ``source``; results are read from / written to ``store``.

    The self-play way of playing: one self-play team per cell and eval difficulty, keyed
    by the cell's own :class:`~alem_eval.analysis.result_keys.ResultKey`, played by the
    one orchestration (:func:`alem_eval.scoring.orchestration.play_matches`: stacks of at
    most ``options.max_stack`` cells sharing one compiled program).

    ``on_progress(message, done, total)`` is called as cells complete;
    ``on_episodes(progress)`` as the evaluator's episodes finish (a live progress bar:
    episodes done of all that run, env steps, elapsed time; cells read back from the
    store do not count).

    With ``record_dir``, every evaluated step is recorded there as the rollout runs
    (:mod:`alem_eval.datasets.recorder`); a cell whose scores are stored but whose recording is
    incomplete is evaluated again (its scores are identical). A recorded episode is reused
    only when it names this run's checkpoint hash, config hash, step cap, protocol and
    env version (:mod:`alem_eval.core.producers`); otherwise it is recorded again, and a
    :class:`RecordingWarning` per cell says what differs. A recording that fails
    (unwritable or full disk) raises :class:`DatasetError` once the scores of the stack
    being evaluated are saved.

    ``sinks``: more :class:`~alem_eval.scoring.orchestration.Sink` s, handed each cell's
    episodes as they end (beside the results store, the recording and progress).
    """
    from alem_eval.analysis.result_keys import ResultKey
    from alem_eval.core.producers import cell_producer
    from alem_eval.evaluate.settings import check_env_version
    from alem_eval.model import checkpoint as ckpt
    from alem_eval.model.loader import cell_checkpoint_dir
    from alem_eval.scoring.orchestration import Match, Member, play_matches
    from alem_eval.scoring.teams import Team

    jobs = _plan(source, cells, options)
    total = len(jobs)
    # Once per cell, named by its id, before anything is loaded: "error" stops here, "warn"
    # warns here. The evaluator is then told not to check again.
    for job in {id(j.cfg): j for j in jobs}.values():
        check_env_version(job.cfg, on_mismatch=options.on_env_mismatch, where=job.cell.id)
        if options.protocol == "reference" and job.cfg.assumed_keys:
            warnings.warn(_assumed_message(job), ReferenceAssumptionWarning, stacklevel=2)

    hashes: dict[str, str] = {}
    matches: list[Match] = []
    members: dict[str, Member] = {}
    for job in jobs:
        if job.cell.id not in hashes:
            hashes[job.cell.id] = ckpt.checkpoint_hash(cell_checkpoint_dir(job.cell_dir))
        members.setdefault(job.cell.id, Member(job.cell, job.cell_dir, job.cfg, job.spec))
        job.key = ResultKey.for_run(
            job.cell.id,
            job.cfg,
            checkpoint_hash=hashes[job.cell.id],
            eval_difficulty=job.eval_difficulty,
            protocol=options.protocol,
            num_episodes=job.num_episodes,
            max_steps=job.max_steps,
        )
        matches.append(
            Match(
                Team((job.cell.id,) * job.cfg.env.num_agents),
                job.key,
                job.eval_difficulty,
                job.num_episodes,
                job.max_steps,
                producer=cell_producer(
                    checkpoint_hash=job.key.checkpoint_hash,
                    config_hash=job.key.config_hash,
                    max_steps=job.key.max_steps,
                ),
                extra=_extra(job, options.protocol),
            )
        )

    def read_back(reused: int, _todo: int) -> None:
        if on_progress:
            on_progress("reused from the results store", reused, total)

    def stored(match: Match, done: int) -> None:
        if on_progress:
            on_progress(f"scored {match.name}", done, total)

    outcome = play_matches(
        members,
        matches,
        protocol=options.protocol,
        store=store,
        batch=options.batch,
        max_stack=options.max_stack,
        record_dir=record_dir,
        sinks=sinks,
        on_read_back=read_back,
        on_stored=stored,
        on_episodes=on_episodes,
    )
    return [
        CellScore(
            job.cell,
            job.eval_difficulty,
            options.protocol,
            outcome.episodes[m],
            reused=m in outcome.reused,
            provenance=_provenance(job.key),
        )
        for job, m in zip(jobs, matches, strict=True)
    ]


class ReferenceAssumptionWarning(UserWarning):
    """'reference' scored a cell whose config.json does not record what roots its key chain."""


def _assumed_message(job: _Job) -> str:
    keys = job.cfg.assumed_keys
    values = ", ".join(f"{k}={job.cfg.value(k)!r}" for k in keys)
    return (
        f"{job.cell.id}: config.json has no full training config, so protocol 'reference' "
        f"assumes {values} (upstream's defaults; SEED from the cell's seed); every episode's "
        "key chain depends on them, so these numbers reproduce upstream only if it ran with "
        "them (recorded with the results)"
    )


def _extra(job: _Job, protocol: str) -> dict[str, Any]:
    """Per-result metadata: the parameter count, and what 'reference' had to assume."""
    extra: dict[str, Any] = {"num_params": job.spec.num_params()}
    if protocol == "reference" and job.cfg.assumed_keys:
        extra["reference_assumed"] = {k: job.cfg.value(k) for k in job.cfg.assumed_keys}
    return extra


def _provenance(key) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(key)
