"""Tables people publish: ONE number format and ONE renderer to Markdown and LaTeX.

The leaderboard, scenario and cross-play tables are :class:`PaperTable` s: label columns
(``stub`` of them) then numeric cells, each an :class:`Estimate` (a point and, where the
table reports one, its interval) or None (not scored: "–" / "--", never 0). Both renderers
share :func:`fmt_number` (``decimals`` places, never ``-0.0``) and the same rules:

* bold: with ``best="max"`` a column's value is bold only when it is the strict best of
  the displayed (rounded) values: a tie bolds nothing, nor does a column of equal values;
* a zero-width interval (lo and hi display the same: one seed, one world, every world
  scoring the same) or a missing one (fewer than 2 worlds) gets the marker ``†`` and the
  table's :attr:`PaperTable.zero_width_note` in its footer;
* the footer lists :attr:`PaperTable.notes` (method, units; one place for more lines).

Markdown is GitHub-flavoured (a pandoc ``Table: caption {#label}`` line when given);
LaTeX is a ``table`` float around a booktabs ``tabular`` (``\\usepackage{booktabs}``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from alem_eval.core.errors import UsageError

MISSING_MD = "–"
MISSING_LATEX = "--"
MARK = "†"
LATEX_MARK = "\\textsuperscript{\\dag}"
BEST_RULES: tuple[str | None, ...] = ("max", None)


class _HasPaperTable(Protocol):
    def paper_table(self, *args: Any, **options: Any) -> PaperTable: ...


class PaperTables:
    """``to_markdown`` and ``to_latex`` of a result with a ``paper_table(...)`` method:
    both take that method's arguments (the leaderboard, scenario and cross-play results,
    and their API objects, share these two)."""

    def to_markdown(self: _HasPaperTable, *args: Any, **options: Any) -> str:
        """:meth:`paper_table` in Markdown, in percent (its arguments)."""
        return self.paper_table(*args, **options).to_markdown()

    def to_latex(self: _HasPaperTable, *args: Any, **options: Any) -> str:
        """:meth:`paper_table` as a ``table`` float around a booktabs ``tabular``
        (``\\usepackage{booktabs}``), in percent (its arguments)."""
        return self.paper_table(*args, **options).to_latex()


def fmt_number(x: float, decimals: int = 1) -> str:
    """``x`` with ``decimals`` places; a value that rounds to zero is ``0.0``, never
    ``-0.0``; non-finite values are ``nan`` / ``inf`` as Python writes them."""
    text = f"{x:.{decimals}f}"
    if math.isfinite(x) and float(text) == 0.0:
        text = f"{0.0:.{decimals}f}"
    return text


class IntervalLike(Protocol):
    """A point estimate and its bounds (``alem_eval.analysis.bootstrap.Interval``)."""

    @property
    def point(self) -> float: ...
    @property
    def lo(self) -> float: ...
    @property
    def hi(self) -> float: ...


def fmt_interval(iv: IntervalLike, decimals: int = 1) -> str:
    """``point [lo, hi]`` by :func:`fmt_number`; ``point [no CI]`` when a bound is not finite."""
    point = fmt_number(iv.point, decimals)
    if not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return f"{point} [no CI]"
    return f"{point} [{fmt_number(iv.lo, decimals)}, {fmt_number(iv.hi, decimals)}]"


def fmt_marked(iv: IntervalLike, decimals: int = 1) -> str:
    """:func:`fmt_interval` with :data:`MARK` after it when the interval has zero width
    at this precision or there is none (terminal tables; their command prints the note)."""
    flagged = Estimate(iv.point, iv.lo, iv.hi).flagged(decimals)
    return fmt_interval(iv, decimals) + (MARK if flagged else "")


def check_decimals(decimals: int) -> int:
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 6:
        raise UsageError(f"decimals must be an integer from 0 to 6, got {decimals!r}")
    return decimals


@dataclass(frozen=True)
class Estimate:
    """One numeric cell on its display scale: ``point`` and, when ``interval``, its
    bounds ``lo`` / ``hi`` (NaN: there is no interval, e.g. fewer than 2 worlds)."""

    point: float
    lo: float = math.nan
    hi: float = math.nan
    interval: bool = True  # the table reports an interval for this cell

    @classmethod
    def of(cls, iv: IntervalLike | None, scale: float = 1.0) -> Estimate | None:
        """From anything with ``point, lo, hi`` (an ``Interval``), times ``scale``."""
        if iv is None:
            return None
        return cls(iv.point * scale, iv.lo * scale, iv.hi * scale)

    def flagged(self, decimals: int) -> bool:
        """The interval shows no uncertainty at this precision (or there is none)."""
        if not self.interval:
            return False
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return True
        return fmt_number(self.lo, decimals) == fmt_number(self.hi, decimals)


Cell = Estimate | str | None


@dataclass(frozen=True)
class PaperTable:
    """Header ``columns`` (one per cell of a row), ``rows`` whose first ``stub`` cells are
    labels; ``groups`` (label, span) head the numeric columns in LaTeX (in Markdown each
    column's header is prefixed by its group's label)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    stub: int = 1
    groups: tuple[tuple[str, int], ...] = ()
    best: str | None = None  # "max": the strict best of each numeric column in bold
    notes: tuple[str, ...] = ()
    zero_width_note: str = (
        "† the interval has zero width (or there is none): one seed or one world gives no "
        "measure of uncertainty, which is not certainty."
    )
    caption: str | None = None
    label: str | None = None
    decimals: int = 1
    ci: bool = True
    title: str | None = None  # a LaTeX comment line above the table

    def __post_init__(self) -> None:
        check_decimals(self.decimals)
        if self.best not in BEST_RULES:
            raise UsageError(f"best must be one of {BEST_RULES}, got {self.best!r}")
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(f"a row of {len(r)} cells under {len(self.columns)} columns")
        if self.groups and sum(n for _, n in self.groups) != len(self.columns) - self.stub:
            raise ValueError("the groups must span the numeric columns")

    def bold_cells(self) -> set[tuple[int, int]]:
        """(row, column) of each strict best (never a tie, never a column of one value)."""
        if self.best is None:
            return set()
        out = set()
        for j in range(self.stub, len(self.columns)):
            shown = {
                i: float(fmt_number(c.point, self.decimals))
                for i, r in enumerate(self.rows)
                if isinstance(c := r[j], Estimate) and math.isfinite(c.point)
            }
            if len(shown) < 2:
                continue
            top = max(shown.values())
            winners = [i for i, v in shown.items() if v == top]
            if len(winners) == 1:
                out.add((winners[0], j))
        return out

    def flagged(self) -> bool:
        return any(
            isinstance(c, Estimate) and c.flagged(self.decimals) for r in self.rows for c in r
        )

    def footer(self) -> list[str]:
        return [*self.notes, *([self.zero_width_note] if self.flagged() else [])]

    def header_labels(self) -> list[str]:
        """Markdown's one header row: each numeric column prefixed by its group."""
        prefixes = [""] * self.stub
        for name, span in self.groups:
            prefixes += [f"{name} "] * span
        prefixes += [""] * (len(self.columns) - len(prefixes))
        return [p + c for p, c in zip(prefixes, self.columns, strict=True)]

    def _number(self, e: Estimate, bold: bool, latex: bool) -> str:
        def num(x: float) -> str:
            s = fmt_number(x, self.decimals)
            return s.replace("-", "$-$") if latex else s

        point = num(e.point)
        if bold:
            point = f"\\textbf{{{point}}}" if latex else f"**{point}**"
        if e.flagged(self.decimals):
            point += LATEX_MARK if latex else MARK
        if not (self.ci and e.interval and math.isfinite(e.lo) and math.isfinite(e.hi)):
            return point
        ci = f"[{num(e.lo)}, {num(e.hi)}]"
        return f"{point} {{\\scriptsize {ci}}}" if latex else f"{point} {ci}"

    def cell_texts(self, latex: bool) -> list[list[str]]:
        bold = self.bold_cells()
        out = []
        for i, r in enumerate(self.rows):
            line = []
            for j, c in enumerate(r):
                if c is None:
                    line.append(MISSING_LATEX if latex else MISSING_MD)
                elif isinstance(c, Estimate):
                    line.append(self._number(c, (i, j) in bold, latex))
                else:
                    line.append(latex_escape(c) if latex else str(c))
            out.append(line)
        return out

    def to_markdown(self) -> str:
        lines = []
        if self.caption or self.label:
            tag = f"{{#{self.label}}}" if self.label else ""
            lines += ["Table: " + " ".join(x for x in (self.caption, tag) if x), ""]
        align = ["l"] * self.stub + ["r"] * (len(self.columns) - self.stub)
        lines.append(md_table(self.header_labels(), self.cell_texts(latex=False), align))
        foot = self.footer()
        return "\n".join(lines) + ("\n\n" + "\n".join(foot) if foot else "") + "\n"

    def to_latex(self) -> str:
        n = len(self.columns)
        lines = [f"% {latex_escape(self.title)}"] if self.title else []
        lines += ["\\begin{table}[htbp]", "\\centering"]
        if self.caption:
            lines.append(f"\\caption{{{latex_escape(self.caption)}}}")
        if self.label:
            lines.append(f"\\label{{{self.label}}}")
        lines += ["\\begin{tabular}{" + "l" * self.stub + "c" * (n - self.stub) + "}", "\\toprule"]
        if self.groups:
            lines.append(
                " & " * self.stub
                + " & ".join(
                    f"\\multicolumn{{{span}}}{{c}}{{{latex_escape(name)}}}"
                    for name, span in self.groups
                )
                + " \\\\"
            )
            rules, start = [], self.stub + 1
            for _, span in self.groups:
                rules.append(f"\\cmidrule(lr){{{start}-{start + span - 1}}}")
                start += span
            lines.append("".join(rules))
        lines.append(" & ".join(latex_escape(c) for c in self.columns) + " \\\\")
        lines.append("\\midrule")
        lines += [" & ".join(r) + " \\\\" for r in self.cell_texts(latex=True)]
        lines += ["\\bottomrule", "\\end{tabular}"]
        foot = self.footer()
        if foot:
            text = " ".join(latex_escape(f).replace(MARK, LATEX_MARK) for f in foot)
            lines += ["\\par\\smallskip", f"{{\\footnotesize {text}}}"]
        lines.append("\\end{table}")
        return "\n".join(lines) + "\n"


def md_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None
) -> str:
    """A GitHub-flavoured Markdown table ('|' in cells escaped); ``align`` l | r | c per
    column (default: numbers, "–" and empty columns right-aligned)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    if align is None:

        def numeric(col: int) -> bool:
            vals = [str(r[col]) for r in rows if str(r[col]) not in (MISSING_MD, "")]
            return all(re.match(r"^\*{0,2}[-+]?\d", v) for v in vals)

        align = ["r" if numeric(i) else "l" for i in range(len(header))]
    sep = ["---:" if a == "r" else ":---:" if a == "c" else ":---" for a in align]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


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
    "–": "--",
    "−": "$-$",
    "×": r"$\times$",
    "±": r"$\pm$",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))
