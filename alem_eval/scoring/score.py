"""Score cells end to end: materialise -> resolve -> group into stacks -> evaluate -> store.

This is the library behind ``alem-eval score``. Cells whose networks share shapes are
stacked and evaluated in one compiled, batched call
(:func:`alem_eval.evaluate.rollout.score_stack`); every finished cell is written to the results store at once (atomically), so an
interrupted run resumes with the cells that are missing, and a cell already scored under
the same provenance is read back instead of recomputed.
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping, Sequence

from alem_eval.core.errors import DatasetError, UsageError
from alem_eval.analysis.metrics import SUMMARY_METRICS, metric_info, units_fields

if TYPE_CHECKING:
    from alem_eval.evaluate.rollout import RolloutProgress


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
) -> list[CellScore]:
    """Score ``cells`` from ``source``; results are read from / written to ``store``.

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
    """
    from alem_eval.model import checkpoint as ckpt
    from alem_eval.evaluate.records import RecordTo
    from alem_eval.evaluate.rollout import RolloutProgress, run_stack
    from alem_eval.evaluate.settings import check_env_version
    from alem_eval.model.loader import cell_checkpoint_dir, load_cell
    from alem_eval.analysis.result_keys import ResultKey, build_rows

    jobs = _plan(source, cells, options)
    total = len(jobs)
    # Once per cell, named by its id, before anything is loaded: "error" stops here, "warn"
    # warns here. The evaluator is then told not to check again.
    for job in {id(j.cfg): j for j in jobs}.values():
        check_env_version(job.cfg, on_mismatch=options.on_env_mismatch, where=job.cell.id)
        if options.protocol == "reference" and job.cfg.assumed_keys:
            warnings.warn(_assumed_message(job), ReferenceAssumptionWarning, stacklevel=2)

    recorders = _Recorders(record_dir, options.protocol) if record_dir is not None else None
    hashes: dict[str, str] = {}
    done: dict[tuple[str, str], CellScore] = {}
    todo: list[_Job] = []
    for job in jobs:
        if job.cell.id not in hashes:
            hashes[job.cell.id] = ckpt.checkpoint_hash(cell_checkpoint_dir(job.cell_dir))
        job.key = ResultKey.for_run(
            job.cell.id,
            job.cfg,
            checkpoint_hash=hashes[job.cell.id],
            eval_difficulty=job.eval_difficulty,
            protocol=options.protocol,
            num_episodes=job.num_episodes,
            max_steps=job.max_steps,
        )
        if recorders is not None:
            recorders.declare(job)
        stored = store.get(job.key) if store is not None else None
        if stored is not None and (recorders is None or recorders.recorded(job)):
            done[(job.cell.id, job.eval_difficulty)] = _from_frame(job, stored, options.protocol)
        else:
            todo.append(job)
    if on_progress:
        on_progress("reused from the results store", len(done), total)

    groups: dict[tuple, list[_Job]] = defaultdict(list)
    for job in todo:
        # Any algorithms together: the evaluator runs them in one compiled program.
        groups[(job.eval_difficulty, job.num_episodes, job.max_steps)].append(job)
    plan = [sp for group in groups.values() for sp in _stacks(group, options.max_stack)]
    episodes_total = sum(len(stack) * stack[0].num_episodes for stack, _ in plan)
    ran = {"episodes": 0, "steps": 0}
    clock = time.perf_counter()

    def stack_progress(p: RolloutProgress) -> None:
        if on_episodes is not None:
            on_episodes(
                RolloutProgress(
                    ran["episodes"] + p.episodes_done,
                    episodes_total,
                    ran["steps"] + p.live_steps,
                    time.perf_counter() - clock,
                )
            )

    def save(job: _Job, episodes: Sequence[dict[str, float]]) -> None:
        """Store a cell's scores: as soon as its last episode ends (a run killed
        while other cells of its stack still run keeps it)."""
        if store is not None:
            store.write(
                build_rows(job.key, episodes),
                job.key,
                extra=_extra(job, options.protocol),
            )
        done[(job.cell.id, job.eval_difficulty)] = CellScore(
            job.cell,
            job.eval_difficulty,
            options.protocol,
            tuple(episodes),
            provenance=_provenance(job.key),
        )
        if on_progress:
            on_progress(f"scored {job.cell.id}", len(done), total)

    def finished(padded: list[_Job], k: int, episodes: list[dict[str, float]]) -> None:
        """``on_team`` of a stack: save the job at index ``k`` of its checkpoints (run_stack
        calls it once per checkpoint that is not padding)."""
        save(padded[k], episodes)

    for stack, padded in plan:
        # Every job of the padded stack once (a shape this stack lacks is padded with a job
        # of another stack).
        loaded = {
            key: load_cell(
                j.cell_dir,
                algorithm=j.cell.algorithm,
                difficulty=j.cell.difficulty,
                seed=j.cell.seed,
                policy_only=True,
                where=j.cell.id,
            )
            for key, j in {id(j): j for j in padded}.items()
        }
        cfgs = [loaded[id(j)].cfg for j in padded]
        weights = [loaded[id(j)].weights for j in padded]
        difficulty = stack[0].eval_difficulty
        first = {id(j): k for k, j in reversed(list(enumerate(padded)))}
        real = {first[id(j)] for j in stack}  # the rest repeats a job, maybe of another stack

        result = run_stack(
            cfgs,
            weights,
            protocol=options.protocol,
            eval_difficulty=difficulty,
            num_episodes=stack[0].num_episodes,
            max_steps=stack[0].max_steps,
            on_env_mismatch="ignore",  # checked above, per cell
            batch=options.batch,
            on_progress=stack_progress,
            record=(
                None
                if recorders is None
                else RecordTo(recorders.get(difficulty), [j.cell.id for j in padded])
            ),
            on_team=functools.partial(finished, padded),
            padding=[k for k in range(len(padded)) if k not in real],
        )
        ran["episodes"] += len(stack) * stack[0].num_episodes
        ran["steps"] += result.live_steps
        if result.record_error is not None:
            raise DatasetError(
                f"recording into {record_dir} stopped: {result.record_error} (the scores "
                "are saved in the results store; rerun with --record to complete it)"
            )
    return [done[(j.cell.id, j.eval_difficulty)] for j in jobs]


class _Recorders:
    """One :class:`alem_eval.datasets.recorder.Recorder` per eval difficulty, opened on first use."""

    def __init__(self, root: Path, protocol: str):
        from alem_eval.envs.loader import installed_env_version

        self.root, self.protocol = root, protocol
        self.env_version = installed_env_version()
        self._open: dict[str, Any] = {}

    def get(self, eval_difficulty: str):
        from alem_eval.datasets.recorder import Recorder

        if eval_difficulty not in self._open:
            self._open[eval_difficulty] = Recorder(
                self.root,
                protocol=self.protocol,
                eval_difficulty=eval_difficulty,
                env_version=self.env_version,
            )
        return self._open[eval_difficulty]

    def declare(self, job: _Job) -> None:
        """Tell the job's recorder what produces its cell's episodes; warn
        (:class:`RecordingWarning`) when the recording holds some another produced."""
        from alem_eval.core.producers import cell_producer

        rec, team = self.get(job.eval_difficulty), _team(job)
        key = job.key
        rec.set_producer(
            team,
            cell_producer(
                checkpoint_hash=key.checkpoint_hash,
                config_hash=key.config_hash,
                max_steps=key.max_steps,
            ),
        )
        changed = {e: c for e in rec.recorded_episodes(team) if (c := rec.changes(team, e))}
        if changed:
            warnings.warn(_changed_message(job, changed, self.root), RecordingWarning, stacklevel=3)

    def recorded(self, job: _Job) -> bool:
        """Is every episode of the job in the recording, recorded as this run would?"""
        rec = self.get(job.eval_difficulty)
        return all(rec.is_complete(_team(job), e) for e in range(job.num_episodes))


def _team(job: _Job) -> tuple[str, ...]:
    return (job.cell.id,) * job.cfg.env.num_agents


class RecordingWarning(UserWarning):
    """``score --record`` found episodes of a cell recorded by another checkpoint, config,
    step cap, protocol or env version: it records them again."""


def _changed_message(job: _Job, changed: Mapping[int, Sequence[str]], root: Path) -> str:
    from alem_eval.core.producers import describe_changes

    again = [e for e in changed if e < job.num_episodes]
    kept = len(changed) - len(again)
    what = describe_changes([c for cs in changed.values() for c in cs])
    n = len(changed)
    text = (
        f"{job.cell.id} ({job.eval_difficulty}): {n} episode{'s' if n > 1 else ''} recorded "
        f"in {root} {'differ' if n > 1 else 'differs'}: {what}"
    )
    if again:
        text += f"; recording {len(again)} of them again"
    if kept:
        text += f"; {kept} beyond this run's {job.num_episodes} episodes stay as they are"
    return text


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


def _stacks(jobs: Sequence[_Job], max_stack: int) -> list[tuple[list[_Job], list[_Job]]]:
    """``(stack, padded)`` pairs: stacks of at most ``max_stack`` jobs (more only when a
    selection has more network shapes than that), each with the SAME number of jobs of
    every network shape (``cfg.network_key``), taken round-robin. ``padded`` lists the
    stack shape by shape, in the same order for every stack, completing a short shape with
    repeats of its last job; the real jobs are ``padded``'s entries that are in ``stack``.
    Every stack of a selection so has one structure: one compiled program scores them all,
    and each cell is stored as soon as its last episode ends (a killed run keeps every
    finished cell, also one whose stack still ran)."""
    by_key: dict[str, list[_Job]] = {}
    for job in jobs:
        by_key.setdefault(job.cfg.network_key, []).append(job)
    per = max(1, min(max_stack // len(by_key), max(len(g) for g in by_key.values())))
    rounds = max(-(-len(g) // per) for g in by_key.values())
    out = []
    for r in range(rounds):
        parts = [(g[r * per : (r + 1) * per], g) for g in by_key.values()]
        stack = [j for part, _ in parts for j in part]
        padded = [j for part, g in parts for j in part + [(part or g)[-1]] * (per - len(part))]
        out.append((stack, padded))
    return out


def _provenance(key) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(key)


def _from_frame(job: _Job, frame, protocol: str) -> CellScore:
    from alem_eval.analysis.result_keys import episode_records

    return CellScore(
        job.cell,
        job.eval_difficulty,
        protocol,
        tuple(episode_records(frame)),
        reused=True,
        provenance=_provenance(job.key),
    )
