"""``alem-eval leaderboard``: Base% / Coord% / Total% per difficulty, ready to publish.

Rows are (budget, algorithm); for each difficulty the three reward-normalised scores of
SUBMISSION.md (spec §7) as the mean over seeds with a 95% stratified bootstrap CI, in
percent. Formats: CSV (numeric columns), Markdown and LaTeX (``mean [lo, hi]``, best mean
per column in bold; LaTeX uses booktabs) and JSON in the upstream leaderboard entry schema.
A (budget, algorithm, difficulty) without scores is missing — empty / "–" / null — never 0.
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
from alem_eval.analysis.metrics import LEADERBOARD_METRICS, metric_info

if TYPE_CHECKING:
    import pandas as pd

FORMATS: tuple[str, ...] = ("md", "csv", "latex", "json")
SCORES: tuple[str, ...] = tuple(LEADERBOARD_METRICS)  # base, coord, total
SCORE_LABELS = {name: metric_info(key).label for name, key in LEADERBOARD_METRICS.items()}
MISSING = {"md": "–", "latex": "--", "csv": ""}

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
    """One (budget, algorithm): per difficulty and score, an Interval in percent or None."""

    entry: Entry
    scores: Mapping[str, Mapping[str, Interval | None]] = field(hash=False)
    seeds: Mapping[str, int] = field(hash=False)  # difficulty -> number of seeds
    params: int | None = None

    def score(self, difficulty: str, name: str) -> Interval | None:
        return self.scores.get(difficulty, {}).get(name)


@dataclass(frozen=True)
class Leaderboard:
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
        ``<difficulty>_seeds`` and ``<difficulty>_<base|coord|total>[_lo|_hi]`` (percent,
        the mean over seeds and its CI; NaN = not scored): the CSV's columns, as numbers."""
        import pandas as pd

        header, rows = _table(self)
        return pd.DataFrame(rows, columns=header)

    def to_csv(self) -> str:
        return to_csv(self)

    def to_markdown(self) -> str:
        return to_markdown(self)

    def to_latex(self) -> str:
        """A booktabs ``tabular`` (best mean per column in bold)."""
        return to_latex(self)

    def to_json(self) -> str:
        """The upstream leaderboard entry schema, one entry per row."""
        return to_json(self)

    def best(self, difficulty: str, name: str, digits: int = 1) -> float | None:
        """The best displayed (rounded) mean of a column, None if the column is empty."""
        vals = [
            round(iv.point, digits)
            for r in self.rows
            if (iv := r.score(difficulty, name)) is not None
        ]
        return max(vals) if vals else None


def build_leaderboard(
    store,
    selectors: Sequence[str] | None = None,
    *,
    settings: BootstrapSettings = BootstrapSettings(),
    protocol: str | None = None,
) -> Leaderboard:
    """The leaderboard of the selected results (runs = seeds whatever ``settings.runs``)."""
    prepared = prepare(
        store, selectors, optional_metrics=list(LEADERBOARD_METRICS.values()), protocol=protocol
    )
    return leaderboard_from(prepared, settings)


def leaderboard_from(prepared: PreparedResults, settings: BootstrapSettings) -> Leaderboard:
    from alem_eval.core.version import __version__

    settings = BootstrapSettings(settings.reps, settings.seed, settings.confidence, "seeds")
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
                    scores[d][name] = row.estimates["mean"].scaled(100.0) if row else None
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
        + f"; mean over seeds with {settings.confidence:.0%} stratified bootstrap CI "
        f"({settings.reps} reps, seed {settings.seed}); zero-shot, homogeneous 3-agent teams"
    )


# ----------------------------------------------------------------------------------------
# Renderers
# ----------------------------------------------------------------------------------------
def render(lb: Leaderboard, fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return {"md": to_markdown, "csv": to_csv, "latex": to_latex, "json": to_json}[fmt](lb)


def _cell_text(iv: Interval | None, best: float | None, fmt: str, digits: int = 1) -> str:
    if iv is None:
        return MISSING[fmt]
    mean = f"{iv.point:.{digits}f}"
    ci = f"[{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"
    is_best = best is not None and round(iv.point, digits) == best
    if fmt == "latex":
        return (f"\\textbf{{{mean}}}" if is_best else mean) + f" {{\\scriptsize {ci}}}"
    return (f"**{mean}**" if is_best else mean) + f" {ci}"


def to_markdown(lb: Leaderboard) -> str:
    from alem_eval.reporting.markdown import md_table

    header = ["Budget", "Algorithm"] + [
        f"{d} {SCORE_LABELS[s]}" for d in lb.difficulties for s in SCORES
    ]
    rows = [
        [r.entry.budget, r.entry.algorithm]
        + [_cell_text(r.score(d, s), lb.best(d, s), "md") for d in lb.difficulties for s in SCORES]
        for r in lb.rows
    ]
    foot = (
        f"Mean over seeds [{lb.settings.confidence:.0%} CI], percent; best mean per column "
        f"in bold; – = not scored. {lb.config}."
    )
    digest = footer_digest_line(lb.digests)
    return md_table(header, rows) + "\n\n" + foot + (f" {digest}" if digest else "") + "\n"


def _table(lb: Leaderboard) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of the numeric table: seeds an int, scores floats, None = not scored."""
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
    in percent, plus ``<difficulty>_seeds``; empty = not scored."""
    header, rows = _table(lb)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    numeric = [i >= 2 and not h.endswith("_seeds") for i, h in enumerate(header)]
    for line in rows:
        w.writerow(["" if v is None else f"{v:.4f}" if num else v for v, num in zip(line, numeric)])
    return buf.getvalue()


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(lb: Leaderboard) -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``)."""
    nd = len(lb.difficulties)
    ns = len(SCORES)
    lines = [
        f"% alem-eval leaderboard: mean over seeds [{lb.settings.confidence:.0%} CI], percent; "
        "best mean per column in bold; -- = not scored",
        f"% {latex_escape(lb.config)}",
        *([f"% {footer_digest_line(lb.digests)}"] if lb.digests is not None else []),
        "\\begin{tabular}{ll" + "c" * (nd * ns) + "}",
        "\\toprule",
        " & & "
        + " & ".join(
            f"\\multicolumn{{{ns}}}{{c}}{{{latex_escape(d.capitalize())}}}" for d in lb.difficulties
        )
        + " \\\\",
        "".join(f"\\cmidrule(lr){{{3 + i * ns}-{2 + (i + 1) * ns}}}" for i in range(nd)),
        "Budget & Algorithm & "
        + " & ".join(latex_escape(SCORE_LABELS[s]) for _ in lb.difficulties for s in SCORES)
        + " \\\\",
        "\\midrule",
    ]
    for r in lb.rows:
        cells = [latex_escape(r.entry.budget), latex_escape(r.entry.algorithm)]
        cells += [
            _cell_text(r.score(d, s), lb.best(d, s), "latex")
            for d in lb.difficulties
            for s in SCORES
        ]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def to_entries(lb: Leaderboard) -> list[dict[str, Any]]:
    """One upstream leaderboard entry (spec §7) per row; missing scores are null."""
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
                            else [round(v, 2) for v in iv.as_list()]
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
