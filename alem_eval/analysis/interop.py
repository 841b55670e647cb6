"""Interoperability: export to marl-eval's JSON, merge results directories.

marl-eval (instadeepai/marl-eval) reads raw experiment data shaped as::

    {environment: {task: {algorithm: {run: {
        "step_0": {"step_count": int, metric: [one value per evaluation episode], ...},
        "absolute_metrics": {metric: [...], ...}}}}}}

Alem maps onto it as environment ``"alem"``, task = eval difficulty, algorithm =
``"<algorithm>_<budget>"`` (lower case), run = ``"seed_<N>"``: the key marl-eval's own
``JsonLogger`` writes. Its ``concatenate_json_files`` (which pools the files of several
jobs) renames a run key already taken to the next free number, which it can do only for a
key that reads as ``<name>_<number>`` (on ``seed<N>`` it fails). Only the final
checkpoints are scored, so each run has one logging step (``step_count`` = the budget in env
steps when it is numeric, else 0) and ``absolute_metrics`` holds the same per-episode
values. marl-eval lower-cases every key, turns ``_`` into spaces in its axis labels and puts metric names
into the file names of its tables (where a ``/`` would name a directory); metric keys are
therefore written as ``team_reward_pct_of_max`` etc. (``/`` -> ``_``, lower case) and
keep their raw scale (fractions in [0, 1]: use ``metrics_to_normalize=[]``).

The difficulties are the benchmark's separate tasks, reported apart and never averaged,
while marl-eval's aggregates (rliable's, over runs x tasks) pool them: an export of several difficulties carries
:attr:`MarlEvalExport.warning`, and ``difficulty=`` exports one.

:func:`merge_results` imports the files of another alem-eval results directory: new keys
are copied (bytes unchanged, atomically), identical ones skipped, and two kinds of
conflict reported: *content* (same provenance key, different numbers; ours is kept unless
``prefer="theirs"``) and *provenance* (the same cell, eval difficulty and protocol scored
from a different checkpoint, config, env version or episode count; both are kept and the
loaders use the most recently written one).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from collections.abc import Sequence

import numpy as np
import pandas as pd

from alem_eval.core.errors import UsageError
from alem_eval.core.fsutil import write_text_atomic
from alem_eval.analysis.results import ResultsStore, StoreEntry, collect_warnings, select_cells
from alem_eval.analysis.result_keys import RESERVED_COLUMNS, ResultKey, ResultsError
from alem_eval.analysis.aggregate import PreparedResults, budget_steps, prepare
from alem_eval.analysis.metrics import HEADLINE_METRICS, metric_info

MARL_EVAL_ENVIRONMENT = "alem"


def marl_eval_run_name(seed: int) -> str:
    """``3`` -> ``"seed_3"`` (marl-eval's ``JsonLogger`` key, which its
    ``concatenate_json_files`` can renumber when two files share it)."""
    return f"seed_{int(seed)}"


def separate_tasks_warning(tasks: Sequence[str]) -> str | None:
    """The warning an export of several difficulties carries (None for one)."""
    if len(tasks) < 2:
        return None
    return (
        f"the {len(tasks)} difficulties ({', '.join(tasks)}) are separate marl-eval tasks: "
        "report each on its own and never average over them (the benchmark's protocol); "
        "--difficulty exports one"
    )


class MarlEvalExport(NamedTuple):
    """What :func:`export_marl_eval` returns; unpacks as ``text, prepared``."""

    text: str
    prepared: PreparedResults

    @property
    def tasks(self) -> tuple[str, ...]:
        """The marl-eval task names written: the eval difficulties, lower case."""
        return tuple(sorted({str(d).lower() for d in self.prepared.frame["eval_difficulty"]}))

    @property
    def warning(self) -> str | None:
        """Set when several difficulties were exported: they are separate tasks, never to be
        averaged (marl-eval's aggregates over tasks would do just that)."""
        return separate_tasks_warning(self.tasks)


def marl_eval_metric_name(key: str) -> str:
    """``"Team/reward_pct_of_max"`` -> ``"team_reward_pct_of_max"`` (marl-eval lower-cases)."""
    return metric_info(key).slug


def marl_eval_algorithm_name(algorithm: str, budget: str) -> str:
    return f"{algorithm}_{budget}".lower()


Grid = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[int, ...]]


def _grid_cells(df: pd.DataFrame) -> set[tuple[str, tuple[str, str], int]]:
    """(eval difficulty, (budget, algorithm), seed) of every scored run."""
    rows = df[["eval_difficulty", "budget", "algorithm", "seed"]].drop_duplicates()
    return {(str(d), (str(b), str(a)), int(s)) for d, b, a, s in rows.itertuples(index=False)}


def largest_complete_grid(present: set[tuple[str, tuple[str, str], int]]) -> Grid:
    """A large difficulties x entries x seeds grid whose every run is present (greedy:
    drop the difficulty or entry whose removal gives the largest complete grid, while that
    grows it; the seeds are those every kept (difficulty, entry) has)."""

    def seeds(ds, es):
        sets = [{s for d2, e2, s in present if d2 == d and e2 == e} for d in ds for e in es]
        return tuple(sorted(set.intersection(*sets))) if sets else ()

    ds = tuple(sorted({d for d, _, _ in present}))
    es = tuple(sorted({e for _, e, _ in present}))
    best = (ds, es, seeds(ds, es))
    while True:
        options = [(tuple(x for x in ds if x != d), es) for d in ds if len(ds) > 1] + [
            (ds, tuple(x for x in es if x != e)) for e in es if len(es) > 1
        ]
        scored = [(len(o[0]) * len(o[1]) * len(sv), o, sv) for o in options for sv in [seeds(*o)]]
        size = len(best[0]) * len(best[1]) * len(best[2])
        top = max(scored, default=None, key=lambda x: x[0])
        if top is None or top[0] <= size:
            return best
        ds, es = top[1]
        best = (ds, es, top[2])


def rectangular(
    prepared: PreparedResults, *, complete_subgrid: bool = False
) -> tuple[pd.DataFrame, str | None]:
    """The rows of a complete difficulties x (budget, algorithm) x seeds grid.

    marl-eval indexes every algorithm by the first algorithm's run names, so a grid with a
    missing run breaks it or silently misaligns. Missing runs are a one-line
    :class:`UsageError` naming them, unless ``complete_subgrid`` (then the largest complete
    sub-grid found by :func:`largest_complete_grid` is kept; the note says what was left
    out)."""
    df = prepared.frame
    present = _grid_cells(df)
    ds = sorted({d for d, _, _ in present})
    es = sorted({e for _, e, _ in present})
    ss = sorted({s for _, _, s in present})
    missing = [(d, e, s) for d in ds for e in es for s in ss if (d, e, s) not in present]
    if not missing:
        return df, None
    if not complete_subgrid:
        names = [f"{b}/{a}/{d}/seed{s}" for d, (b, a), s in missing]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise UsageError(
            f"marl-eval needs a complete grid (every algorithm with the same seeds on every "
            f"difficulty); missing: {shown} (score them, narrow the selection, or pass "
            "--complete-subgrid)"
        )
    kd, ke, ks = largest_complete_grid(present)
    if not ks:
        raise UsageError("no complete sub-grid of difficulties x algorithms x seeds exists")
    keep = df.apply(
        lambda r: (
            str(r["eval_difficulty"]) in kd
            and (str(r["budget"]), str(r["algorithm"])) in ke
            and int(r["seed"]) in ks
        ),
        axis=1,
    )
    dropped = len(present) - len(kd) * len(ke) * len(ks)
    note = (
        f"exported the complete sub-grid {len(kd)} difficulties x {len(ke)} algorithms x "
        f"{len(ks)} seeds; {dropped} scored runs left out"
    )
    return df[keep], note


def to_marl_eval(
    prepared: PreparedResults,
    metrics: Sequence[str] | None = None,
    *,
    environment: str = MARL_EVAL_ENVIRONMENT,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The prepared rows in marl-eval's raw-data layout (see the module docstring), and
    notes on what was left out; a complete grid only (see :func:`rectangular`).

    Every run must hold a value of every exported metric: marl-eval averages each run's
    list, and an empty one turns into NaN in its matrices (or an error when normalised). A
    metric some run has no finite value of is left out of every run (a note says which);
    non-finite values are dropped from their run's list (a note counts them). Names that
    coincide once lower-cased (metrics, ``<algorithm>_<budget>``, tasks) are an error, not
    one silently overwriting the other."""
    df, _ = rectangular(prepared)
    keys = list(metrics) if metrics else [m for m in df.columns if m not in RESERVED_COLUMNS]
    names = {k: marl_eval_metric_name(k) for k in keys}
    if len(set(names.values())) != len(names) or "step_count" in names.values():
        raise UsageError(
            "metric names collide once lower-cased for marl-eval; export fewer metrics"
        )
    algos = {(str(a), str(b)) for a, b in zip(df["algorithm"], df["budget"], strict=True)}
    diffs = {str(d) for d in df["eval_difficulty"]}
    for what, lowered, n in (
        ("names <algorithm>_<budget>", {marl_eval_algorithm_name(*x) for x in algos}, len(algos)),
        ("task names (eval difficulties)", {d.lower() for d in diffs}, len(diffs)),
    ):
        if len(lowered) != n:
            raise UsageError(f"{what} collide once lower-cased for marl-eval: narrow the selection")
    runs = []
    for (diff, budget, alg, seed), g in df.groupby(
        ["eval_difficulty", "budget", "algorithm", "seed"], sort=True
    ):
        g = g.sort_values("episode")
        runs.append(((diff, budget, alg, seed), {k: g[k].to_numpy(dtype=float) for k in keys}))
    empty = [k for k in keys if any(not np.isfinite(v[k]).any() for _, v in runs)]
    dropped = sum(int((~np.isfinite(v[k])).sum()) for _, v in runs for k in keys if k not in empty)
    notes = []
    if empty:
        notes.append(
            f"left out {', '.join(names[k] for k in empty)}: some runs have no value of it"
        )
    if dropped:
        notes.append(f"{dropped} non-finite value(s) left out of their runs' lists")
    if len({seed for (_, _, _, seed), _ in runs}) == 1:
        notes.append("one seed per algorithm: marl-eval's intervals over runs have zero width")
    kept = [k for k in keys if k not in empty]
    if not kept:
        raise UsageError("no metric has a value in every run: nothing to export")
    tasks: dict[str, Any] = {}
    for (diff, budget, alg, seed), values in runs:
        lists = {names[k]: [float(x) for x in values[k] if np.isfinite(x)] for k in kept}
        run = {
            "step_0": {"step_count": budget_steps(str(budget)) or 0, **lists},
            "absolute_metrics": {k: list(v) for k, v in lists.items()},
        }
        algo = marl_eval_algorithm_name(str(alg), str(budget))
        tasks.setdefault(str(diff).lower(), {}).setdefault(algo, {})[marl_eval_run_name(seed)] = run
    return {environment: tasks}, tuple(notes)


def export_marl_eval(
    store: ResultsStore,
    out: str | Path | None,
    *,
    selectors: Sequence[str] | None = None,
    metrics: Sequence[str] = (),
    protocol: str | None = None,
    complete_subgrid: bool = False,
    difficulty: str | None = None,
) -> MarlEvalExport:
    """Write (or, with ``out=None``, just return) the marl-eval JSON of the selection:
    every eval difficulty in it, or only ``difficulty`` (one marl-eval task). Several
    difficulties set the result's ``warning`` (they are never to be averaged).

    Default metrics: the headline ones present (Base%, Coord%, Total%, achievement fractions).
    """
    prepared = prepare(
        store,
        selectors,
        metrics=metrics,
        optional_metrics=[] if metrics else [m.key for m in HEADLINE_METRICS],
        protocol=protocol,
    )
    if difficulty is not None:
        prepared = only_difficulty(prepared, difficulty)
    keys = prepared.metrics or tuple(
        m.key for m in HEADLINE_METRICS if m.key in prepared.frame.columns
    )
    if not keys:
        raise UsageError("no metric to export: name one with --metric")
    frame, note = rectangular(prepared, complete_subgrid=complete_subgrid)
    if note:
        prepared = dataclasses.replace(prepared, frame=frame, notes=(*prepared.notes, note))
    data, notes = to_marl_eval(prepared, keys)
    if notes:
        prepared = dataclasses.replace(prepared, notes=(*prepared.notes, *notes))
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if out is not None:
        write_text_atomic(out, text)
    return MarlEvalExport(text, prepared)


def only_difficulty(prepared: PreparedResults, difficulty: str) -> PreparedResults:
    """The rows scored on eval difficulty ``difficulty`` (any case); a one-line
    :class:`UsageError` naming those present when there are none."""
    diffs = prepared.frame["eval_difficulty"].astype(str)
    keep = diffs.str.lower() == difficulty.lower()
    if not keep.any():
        present = ", ".join(sorted(set(diffs))) or "none"
        raise UsageError(
            f"--difficulty {difficulty}: no scored results on it in the selection "
            f"(present: {present})"
        )
    return dataclasses.replace(prepared, frame=prepared.frame[keep])


# ----------------------------------------------------------------------------------------
# Merge
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MergeConflict:
    cell: str
    eval_difficulty: str
    protocol: str
    kind: str  # "content" | "provenance"
    detail: str
    resolution: str

    def as_record(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class MergeReport:
    source: str
    dest: str
    copied: tuple[ResultKey, ...]
    identical: tuple[ResultKey, ...]
    replaced: tuple[ResultKey, ...]
    conflicts: tuple[MergeConflict, ...]
    notes: tuple[str, ...]
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        return (
            f"{verb} {len(self.copied)} new, {len(self.identical)} already present, "
            f"{len(self.replaced)} replaced, {len(self.conflicts)} conflicts, "
            f"{len(self.notes)} unreadable/skipped"
        )


def _same_numbers(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    cols_a = sorted(c for c in a.columns if c not in RESERVED_COLUMNS)
    cols_b = sorted(c for c in b.columns if c not in RESERVED_COLUMNS)
    if cols_a != cols_b or len(a) != len(b):
        return False
    a, b = a.sort_values("episode"), b.sort_values("episode")
    return bool(
        np.array_equal(a[cols_a].to_numpy(float), b[cols_a].to_numpy(float), equal_nan=True)
    )


def _key_diff(ours: ResultKey, theirs: ResultKey) -> str:
    return ", ".join(
        f"{f.name} {getattr(ours, f.name)!r} vs {getattr(theirs, f.name)!r}"
        for f in dataclasses.fields(ResultKey)
        if getattr(ours, f.name) != getattr(theirs, f.name)
    )


def merge_results(
    dest: ResultsStore,
    source: ResultsStore,
    *,
    selectors: Sequence[str] | None = None,
    prefer: str = "ours",
    dry_run: bool = False,
) -> MergeReport:
    """Import the results of ``source`` into ``dest`` (see the module docstring)."""
    if prefer not in ("ours", "theirs"):
        raise UsageError(f"--prefer must be 'ours' or 'theirs', got {prefer!r}")
    if Path(source.root).resolve() == Path(dest.root).resolve():
        raise UsageError("cannot merge a results directory into itself")
    if not Path(source.root).is_dir():
        raise ResultsError(f"no results directory at {source.root}")
    with collect_warnings() as notes:
        # the cells' own scores and the teams' (cross-play, scenarios): all of it moves;
        # a selector has to match one of them, not each (a store without teams is common)
        theirs = source.entries() + source.entries(teams=True)
        if selectors:
            keep = select_cells([e.key.cell for e in theirs], selectors)
            theirs = [e for e in theirs if e.key.cell in keep]
        ours_by_slot: dict[tuple, list[StoreEntry]] = {}
        for e in dest.entries() + dest.entries(teams=True):
            ours_by_slot.setdefault(e.key.slot, []).append(e)
        if not theirs:
            raise ResultsError(f"no scored results in {source.root}")
        copied, identical, replaced, conflicts = [], [], [], []
        for e in theirs:
            k = e.key
            same_slot = ours_by_slot.get(k.slot, [])
            same_key = [o for o in same_slot if o.key == k]
            if same_key:
                a, b = dest.read(same_key), source.read([e])
                if _same_numbers(a, b):
                    identical.append(k)
                    continue
                take = prefer == "theirs"
                conflicts.append(
                    MergeConflict(
                        k.cell,
                        k.eval_difficulty,
                        k.protocol,
                        "content",
                        "same provenance key, different numbers (e.g. another jax build or device)",
                        "replaced with theirs" if take else "kept ours",
                    )
                )
                if take:
                    replaced.append(k)
                    if not dry_run:
                        dest.import_entry(e)
                continue
            for o in same_slot:
                conflicts.append(
                    MergeConflict(
                        k.cell,
                        k.eval_difficulty,
                        k.protocol,
                        "provenance",
                        _key_diff(o.key, k),
                        "kept both; loaders use the most recently written",
                    )
                )
            copied.append(k)
            if not dry_run:
                dest.import_entry(e)
    return MergeReport(
        str(source.root),
        str(dest.root),
        tuple(copied),
        tuple(identical),
        tuple(replaced),
        tuple(conflicts),
        tuple(notes),
        dry_run,
    )
