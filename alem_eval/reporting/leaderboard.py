"""``alem-eval leaderboard``: Base% / Coord% / Total% per difficulty, ready to publish.

Rows are (budget, algorithm); for each difficulty the three reward-normalised scores of
SUBMISSION.md (spec §7) as the mean over the runs (seeds; episodes with ``runs="episodes"``)
with a 95% stratified bootstrap CI (expanded percentile by default, ``method="percentile"``
for rliable's; over the training seeds, the protocol's worlds being fixed). Units
(:mod:`alem_eval.analysis.metrics`): the object, its DataFrame and CSV hold fractions in
[0, 1]; the Markdown and LaTeX tables show percent
(:class:`alem_eval.core.tables.PaperTable`: a strict best per column in bold, a note on
zero-width intervals, LaTeX in booktabs); the JSON is the upstream leaderboard entry schema,
in percent as upstream's leaderboard publishes it. A (budget, algorithm, difficulty)
without scores is missing — empty / "–" / null — never 0.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping, Sequence

from alem_eval.algorithms.registry import get_algorithm
from alem_eval.analysis.aggregate import (
    Entry,
    Group,
    PreparedResults,
    budget_steps,
    difficulty_order,
    grid,
    prepare,
    summarize,
    with_one_seed_note,
)
from alem_eval.analysis.bootstrap import BootstrapSettings, Interval
from alem_eval.analysis.digests import Digests, footer_digest_line, prepared_digests
from alem_eval.algorithms.config import DIFFICULTIES
from alem_eval.core.errors import UsageError
from alem_eval.analysis.metrics import LEADERBOARD_METRICS, UNITS, metric_info, pick_metrics
from alem_eval.core.tables import (
    MISSING_LATEX,
    MISSING_MD,
    Estimate,
    PaperTable,
    PaperTables,
    latex_escape as latex_escape,  # re-exported: the leaderboard's LaTeX escaping
)

if TYPE_CHECKING:
    import pandas as pd

FORMATS: tuple[str, ...] = ("md", "csv", "latex", "json")
SCORES: tuple[str, ...] = tuple(LEADERBOARD_METRICS)  # base, coord, total
SCORE_LABELS = {name: metric_info(key).label for name, key in LEADERBOARD_METRICS.items()}
MISSING = {"md": MISSING_MD, "latex": MISSING_LATEX, "csv": ""}
PERCENT = 100.0  # fractions -> the percent of the human tables and the upstream JSON

_TRIPLE: dict[str, Any] = {
    "type": ["array", "null"],
    "items": {"type": "number"},
    "minItems": 3,
    "maxItems": 3,
}
LEADERBOARD_ENTRY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Alem leaderboard entry (SUBMISSION.md)",
    "type": "object",
    "required": [
        "id",
        "name",
        "config",
        "type",
        "family",
        "params",
        "harness_version",
        "verified",
        "scores",
    ],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "config": {"type": "string"},
        "type": {"enum": ["open-weight", "proprietary"]},
        "family": {"type": "string"},
        "params": {"type": ["integer", "string", "null"]},
        "harness_version": {"type": "string"},
        "verified": {"type": "boolean"},
        "scores": {
            "type": "object",
            "required": list(DIFFICULTIES),
            "additionalProperties": False,
            "properties": {
                d: {
                    "type": "object",
                    "required": list(SCORES),
                    "additionalProperties": False,
                    "properties": {s: _TRIPLE for s in SCORES},
                }
                for d in DIFFICULTIES
            },
        },
    },
}


@dataclass(frozen=True)
class LeaderboardRow:
    """One (budget, algorithm): per difficulty and score, an Interval (fractions) or None."""

    entry: Entry
    scores: Mapping[str, Mapping[str, Interval | None]] = field(hash=False)
    seeds: Mapping[str, int] = field(hash=False)  # difficulty -> number of seeds
    params: int | None = None

    def score(self, difficulty: str, name: str) -> Interval | None:
        return self.scores.get(difficulty, {}).get(name)


@dataclass(frozen=True)
class Leaderboard(PaperTables):
    rows: tuple[LeaderboardRow, ...]
    difficulties: tuple[str, ...]
    protocol: str
    settings: BootstrapSettings
    harness_version: str
    config: str  # free-text description of how the numbers were made
    notes: tuple[str, ...] = ()
    # The results and config digests of the numbers (alem_eval.analysis.digests)
    digests: Digests | None = field(default=None, compare=False)

    # The publishable renderings (``alem_eval.leaderboard(...)`` returns this object).
    def to_frame(self) -> pd.DataFrame:
        """One row per (budget, algorithm): ``budget, algorithm`` and per difficulty
        ``<difficulty>_seeds`` and ``<difficulty>_<base|coord|total>[_lo|_hi]`` (fractions
        in [0, 1]: the mean and its CI; NaN = not scored): the CSV's columns, as numbers.
        ``.attrs["units"]`` names the unit."""
        import pandas as pd

        header, rows = _table(self)
        df = pd.DataFrame(rows, columns=header)
        df.attrs["units"] = UNITS
        return df

    def to_csv(self) -> str:
        return to_csv(self)

    def to_json(self) -> str:
        """The upstream leaderboard entry schema, one entry per row (percent)."""
        return to_json(self)

    @property
    def scored_difficulties(self) -> tuple[str, ...]:
        """The difficulties some row has a score on (the tables' default columns)."""
        return tuple(d for d in self.difficulties if any(r.seeds.get(d) for r in self.rows))

    def footer_notes(self) -> list[str]:
        """The lines under the Markdown and LaTeX tables: what the numbers are, in what
        unit, and how they were made (add a line here to add it to both)."""
        what = "seeds" if self.settings.runs == "seeds" else "episodes (every episode a run)"
        return [
            f"Mean over {what} [{self.settings.confidence:.0%} CI], in percent; the strict "
            "best mean of a column in bold; a dash = not scored.",
            f"{self.config}.",
            *([footer_digest_line(self.digests)] if self.digests is not None else []),
        ]

    def paper_table(
        self,
        difficulties: Sequence[str] | None = None,
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> PaperTable:
        """The table both renderers draw: ``difficulties`` (default: the scored ones, in
        order), ``metrics`` (``base``, ``coord``, ``total`` or their labels; default all
        three), ``decimals`` places, an optional ``caption`` and ``label``, ``ci`` False
        for the means alone."""
        ds = (
            self.scored_difficulties
            if difficulties is None
            else _pick(difficulties, self.difficulties, "difficulty")
        )
        names = SCORES if metrics is None else _pick_scores(metrics)
        rows = tuple(
            (r.entry.budget, r.entry.algorithm)
            + tuple(Estimate.of(r.score(d, s), PERCENT) for d in ds for s in names)
            for r in self.rows
        )
        runs = "seed" if self.settings.runs == "seeds" else "episode"
        return PaperTable(
            columns=("Budget", "Algorithm", *(SCORE_LABELS[s] for _ in ds for s in names)),
            rows=rows,
            stub=2,
            groups=tuple((d, len(names)) for d in ds),
            best="max",
            notes=tuple(self.footer_notes()),
            zero_width_note=f"† zero-width interval: one {runs}, or every {runs} scoring the "
            "same, gives no measure of uncertainty (which is not certainty).",
            caption=caption,
            label=label,
            decimals=decimals,
            ci=ci,
            title=f"alem-eval leaderboard: {self.config}",
        )


def _pick(names: Sequence[str] | str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    chosen = [names] if isinstance(names, str) else list(names)
    bad = [n for n in chosen if n not in allowed]
    if bad or not chosen:
        got = ", ".join(map(repr, bad)) if bad else "none"
        raise UsageError(f"{what} must be among {', '.join(allowed)}, got {got}")
    return tuple(dict.fromkeys(chosen))


def _pick_scores(metrics: Sequence[str] | str) -> tuple[str, ...]:
    """Leaderboard score names from names, keys, labels or aliases (``"total"``, ``"Total%"``)."""
    name_of = {key: name for name, key in LEADERBOARD_METRICS.items()}
    return tuple(name_of[k] for k in pick_metrics(metrics, LEADERBOARD_METRICS.values()))


def build_leaderboard(
    store,
    selectors: Sequence[str] | None = None,
    *,
    settings: BootstrapSettings = BootstrapSettings(),
    protocol: str | None = None,
) -> Leaderboard:
    """The leaderboard of the selected results (runs = ``settings.runs``: seeds, or every
    episode a run)."""
    prepared = prepare(
        store, selectors, optional_metrics=list(LEADERBOARD_METRICS.values()), protocol=protocol
    )
    return leaderboard_from(prepared, settings)


def leaderboard_from(prepared: PreparedResults, settings: BootstrapSettings) -> Leaderboard:
    from alem_eval.core.version import __version__

    prepared = with_one_seed_note(prepared, settings.runs)
    df = prepared.frame
    keys = [k for k in LEADERBOARD_METRICS.values() if k in df.columns]
    if not keys:
        raise UsageError(
            "the selected results hold none of the leaderboard metrics "
            f"({', '.join(LEADERBOARD_METRICS.values())})"
        )
    sums = summarize(df, keys, settings)
    budgets, algorithms, present = grid(df)
    difficulties = tuple(sorted(set(DIFFICULTIES) | set(present), key=difficulty_order))
    params = _params(prepared)
    rows = []
    for b in budgets:
        for a in algorithms:
            scores: dict[str, dict[str, Interval | None]] = {}
            seeds: dict[str, int] = {}
            for d in difficulties:
                g = Group(b, a, d)
                scores[d] = {}
                for name, key in LEADERBOARD_METRICS.items():
                    row = sums.get(key, {}).get(g)
                    scores[d][name] = row.estimates["mean"] if row else None
                    if row:
                        seeds[d] = row.n_seeds
            if seeds:
                rows.append(LeaderboardRow(Entry(b, a), scores, seeds, params.get(Entry(b, a))))
    harness = ", ".join(sorted({str(v) for v in df["alem_eval_version"].dropna().unique()}))
    digests = prepared_digests(
        prepared.root,
        prepared.entries,
        df,
        {"command": "leaderboard", "bootstrap": dataclasses.asdict(settings)},
    )
    return Leaderboard(
        tuple(rows),
        difficulties,
        prepared.protocol,
        settings,
        f"alem-eval {harness or __version__}",
        _config_text(prepared, settings),
        prepared.notes,
        digests,
    )


def _params(prepared: PreparedResults) -> dict[Entry, int]:
    """Parameter count per entry: recorded at scoring time (store extra ``num_params``) if
    every seed agrees, else the manifest's count for released cells."""
    seen: dict[Entry, set[int]] = {}
    for e in prepared.entries:
        n = e.extra.get("num_params") if isinstance(e.extra, Mapping) else None
        if isinstance(n, int) and not isinstance(n, bool):
            b, a = e.key.cell.split("/")[:2]
            seen.setdefault(Entry(b, a), set()).add(n)
    out = {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}
    try:
        from alem_eval.hub.manifest import Cell, load_manifest

        manifest = load_manifest()
    except Exception:
        return out
    for b, a in {tuple(c.split("/")[:2]) for c in prepared.frame["cell"].unique()}:
        entry = Entry(b, a)
        if entry not in out:
            counts = {
                manifest.expected_params(Cell(b, a, d, s)) for d in DIFFICULTIES for s in range(5)
            } - {None}
            value = counts.pop() if len(counts) == 1 else None
            if value is not None:
                out[entry] = value
    return out


def _config_text(prepared: PreparedResults, settings: BootstrapSettings) -> str:
    df = prepared.frame
    per_cell = df.groupby("cell")["episode"].count()
    seeds = df.groupby(["budget", "algorithm", "eval_difficulty"])["seed"].nunique()
    eps = sorted(set(per_cell.tolist()))
    n_seeds = sorted(set(seeds.tolist()))
    steps = sorted({e.key.max_steps for e in prepared.entries})

    def span(v: list[int]) -> str:
        return str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}"

    def plural(v: list[int], word: str) -> str:
        return f"{span(v)} {word}" + ("" if v == [1] else "s")

    return (
        f"alem-eval protocol {prepared.protocol}; {plural(n_seeds, 'seed')} x "
        f"{plural(eps, 'episode')} per difficulty"
        + (f", max {span(steps)} steps" if steps else "")
        + f"; mean over {'seeds' if settings.runs == 'seeds' else 'episodes'} with "
        f"{settings.confidence:.0%} {settings.method_name} bootstrap CI "
        f"({settings.reps} reps, seed {settings.seed}) "
        + (
            "over the training seeds, each seed scored on the protocol's fixed worlds"
            if settings.runs == "seeds"
            else "over the episodes (the protocol's fixed worlds)"
        )
        + "; zero-shot, homogeneous 3-agent teams"
    )


# ----------------------------------------------------------------------------------------
# Renderers
# ----------------------------------------------------------------------------------------
def render(lb: Leaderboard, fmt: str, **table: Any) -> str:
    """``lb`` in ``fmt``; ``table``: the Markdown / LaTeX table's keyword arguments
    (:meth:`Leaderboard.paper_table`)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt in ("md", "latex"):
        return (to_markdown if fmt == "md" else to_latex)(lb, **table)
    return {"csv": to_csv, "json": to_json}[fmt](lb)


def to_markdown(lb: Leaderboard, **table: Any) -> str:
    """:meth:`Leaderboard.to_markdown` (``table``: its keyword arguments)."""
    return lb.to_markdown(**table)


def _table(lb: Leaderboard) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of the numeric table: seeds an int, scores fractions, None = not scored."""
    header = ["budget", "algorithm"]
    for d in lb.difficulties:
        header.append(f"{d}_seeds")
        for s in SCORES:
            header += [f"{d}_{s}", f"{d}_{s}_lo", f"{d}_{s}_hi"]
    rows = []
    for r in lb.rows:
        line: list[Any] = [r.entry.budget, r.entry.algorithm]
        for d in lb.difficulties:
            line.append(r.seeds.get(d))
            for s in SCORES:
                iv = r.score(d, s)
                line += [None] * 3 if iv is None else iv.as_list()
        rows.append(line)
    return header, rows


def to_csv(lb: Leaderboard) -> str:
    """One row per (budget, algorithm); ``<difficulty>_<score>[_lo|_hi]`` numeric columns
    (fractions in [0, 1]), plus ``<difficulty>_seeds``; empty = not scored."""
    header, rows = _table(lb)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    numeric = [i >= 2 and not h.endswith("_seeds") for i, h in enumerate(header)]
    for line in rows:
        w.writerow(["" if v is None else f"{v:.6f}" if num else v for v, num in zip(line, numeric)])
    return buf.getvalue()


def to_latex(lb: Leaderboard, **table: Any) -> str:
    """:meth:`Leaderboard.to_latex` (``table``: its keyword arguments)."""
    return lb.to_latex(**table)


def to_entries(lb: Leaderboard) -> list[dict[str, Any]]:
    """One upstream leaderboard entry (spec §7) per row, in percent as upstream publishes
    it (the one machine output not in fractions: its schema fixes the scale); missing
    scores are null."""
    out = []
    for r in lb.rows:
        a, b = r.entry.algorithm, r.entry.budget
        algo = get_algorithm(a, where="leaderboard")
        steps = budget_steps(b)
        name = f"{algo.display_name} ({b} steps)" if steps else f"{algo.display_name} ({b})"
        seeds = ", ".join(f"{d} {n}" for d, n in r.seeds.items())
        out.append(
            {
                "id": f"{a}-{b}".lower(),
                "name": name,
                "config": f"{lb.config}; seeds per difficulty: {seeds}" + _digest_text(lb),
                "type": "open-weight",
                "family": algo.family,
                "params": r.params,
                "harness_version": lb.harness_version,
                "verified": False,
                "scores": {
                    d: {
                        s: (
                            None
                            if (iv := r.score(d, s)) is None
                            else [round(v, 2) for v in iv.scaled(PERCENT).as_list()]
                        )
                        for s in SCORES
                    }
                    for d in DIFFICULTIES
                },
            }
        )
    return out


def _digest_text(lb: Leaderboard) -> str:
    """The digests in an entry's free-text ``config`` (the upstream schema has no field
    for them)."""
    d = lb.digests
    return (
        ""
        if d is None
        else f"; results digest {d.results} ({d.algorithm}), config digest {d.config}"
    )


def to_json(lb: Leaderboard) -> str:
    entries = to_entries(lb)
    for e in entries:
        problems = validate(e)
        if problems:  # pragma: no cover - a bug, not a user error
            raise AssertionError(f"leaderboard entry {e['id']} breaks the schema: {problems}")
    text = json.dumps(entries, indent=2, allow_nan=False)
    # Keep each [mean, ci_low, ci_high] triple on one line.
    text = re.sub(
        r"\[\s+(-?[\d.eE+-]+),\s+(-?[\d.eE+-]+),\s+(-?[\d.eE+-]+)\s+\]", r"[\1, \2, \3]", text
    )
    return text + "\n"


# ----------------------------------------------------------------------------------------
# A small JSON-Schema subset validator (type, enum, required, properties,
# additionalProperties, items, minItems, maxItems, minLength) - enough for the entry schema.
# ----------------------------------------------------------------------------------------
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(v: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, _TYPES[t])


def validate(
    instance: Any, schema: Mapping[str, Any] = LEADERBOARD_ENTRY_SCHEMA, path: str = "$"
) -> list[str]:
    """Schema violations of ``instance`` (empty when valid); triples also need lo<=mean<=hi."""
    errs: list[str] = []
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is_type(instance, t) for t in types):
            return [f"{path}: expected {'/'.join(types)}, got {type(instance).__name__}"]
    if "enum" in schema and instance not in schema["enum"]:
        errs.append(f"{path}: {instance!r} not in {schema['enum']}")
    if isinstance(instance, str) and len(instance) < schema.get("minLength", 0):
        errs.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(instance, dict):
        for k in schema.get("required", []):
            if k not in instance:
                errs.append(f"{path}: missing {k!r}")
        props = schema.get("properties", {})
        for k, v in instance.items():
            if k in props:
                errs += validate(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected {k!r}")
    if isinstance(instance, list):
        if len(instance) < schema.get("minItems", 0) or len(instance) > schema.get(
            "maxItems", 1 << 30
        ):
            errs.append(f"{path}: {len(instance)} items")
        if "items" in schema:
            for i, v in enumerate(instance):
                errs += validate(v, schema["items"], f"{path}[{i}]")
        if schema is _TRIPLE and not errs and not instance[1] <= instance[0] <= instance[2]:
            errs.append(f"{path}: expected ci_low <= mean <= ci_high")
    return errs
