"""The metric registry: what each scored column is called, labelled and scaled for people.

ONE table (:data:`METRICS`) that ``score`` (its summary table), ``report``, ``leaderboard``
and ``export`` read. Keys are the verbatim ``compute_score`` columns of the results store.

Units (one convention, :data:`UNITS`): every machine output (JSON, CSV, DataFrames) holds
the values as stored, fractions in [0, 1] for the fraction metrics, and names its unit (a
JSON document's ``units`` / ``units_note``, :func:`units_fields`; a column is called by
:attr:`MetricInfo.name`, never by a ``%`` label). Human tables (terminal, Markdown, LaTeX)
multiply by :attr:`MetricInfo.scale` and say "percent". Two formats fix their own scale:
the upstream leaderboard entry JSON (percent, as upstream's leaderboard publishes it) and
the marl-eval export (its format's).

=====================================  ==========  =====================================
key                                    label       aliases (``--metric``)
=====================================  ==========  =====================================
``Team/normal_reward_pct_of_max``      Base%       base
``Team/coord_reward_pct_of_max``       Coord%      coord, coordination
``Team/reward_pct_of_max``             Total%      total
``Team/achievement_pct``               Ach%        achievement, achievements
``Team/normal_achievement_pct``        Base ach%   normal_achievement
``Team/coordination_achievement_pct``  Coord ach%  coordination_achievement
=====================================  ==========  =====================================

Any other column is described by its name; ``Team/*_pct`` and ``Agent<N>/*_pct`` columns
are recognised as fractions.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from collections.abc import Iterable

from alem_eval.core.errors import UsageError


@dataclass(frozen=True)
class MetricInfo:
    """How a metric column is named, labelled and scaled for people."""

    key: str  # the verbatim compute_score key (a results-store column)
    label: str  # short column label, e.g. "Total%"
    description: str
    fraction: bool  # values are fractions in [0, 1]: shown x100, optimality gap at gamma=1
    aliases: tuple[str, ...] = ()

    @property
    def scale(self) -> float:
        """Display factor: 100 for fractions (shown in percent), else 1."""
        return 100.0 if self.fraction else 1.0

    @property
    def name(self) -> str:
        """The label without its unit (``"Total"``): what machine outputs call the metric."""
        return self.label.removesuffix("%").rstrip()

    @property
    def unit(self) -> str:
        return "%" if self.fraction else ""

    @property
    def slug(self) -> str:
        """File-name form: ``"Team/reward_pct_of_max"`` -> ``"team_reward_pct_of_max"``."""
        return re.sub(r"[^a-z0-9]+", "_", self.key.lower()).strip("_")

    def format_mean_se(self, mean: float | None, se: float | None = None) -> str | None:
        """``"12.34 ± 0.56"`` on the display scale (None when there is no value)."""
        if mean is None:
            return None
        return f"{mean * self.scale:.2f} ± {(se or 0.0) * self.scale:.2f}"


BASE = "Team/normal_reward_pct_of_max"
COORD = "Team/coord_reward_pct_of_max"
TOTAL = "Team/reward_pct_of_max"
ACHIEVEMENT = "Team/achievement_pct"

METRICS: tuple[MetricInfo, ...] = (
    MetricInfo(
        BASE, "Base%", "reward-weighted share of the 66 normal achievements", True, ("base",)
    ),
    MetricInfo(
        COORD,
        "Coord%",
        "reward-weighted share of the 27 coordination achievements",
        True,
        ("coord", "coordination"),
    ),
    MetricInfo(TOTAL, "Total%", "reward-weighted share of all 93 achievements", True, ("total",)),
    MetricInfo(
        ACHIEVEMENT,
        "Ach%",
        "achievements unlocked by any agent / 93",
        True,
        ("achievement", "achievements"),
    ),
    MetricInfo(
        "Team/normal_achievement_pct",
        "Base ach%",
        "normal achievements unlocked by any agent / 66",
        True,
        ("normal_achievement",),
    ),
    MetricInfo(
        "Team/coordination_achievement_pct",
        "Coord ach%",
        "coordination achievements unlocked by any agent / 27",
        True,
        ("coordination_achievement",),
    ),
)
# The headline metrics: the report's headline table and export's default selection.
HEADLINE_METRICS: tuple[MetricInfo, ...] = METRICS
# The leaderboard's three reward-normalised scores (SUBMISSION.md), score name -> key.
LEADERBOARD_METRICS: dict[str, str] = {"base": BASE, "coord": COORD, "total": TOTAL}
# The columns of `score`'s summary table, in order.
SUMMARY_METRICS: tuple[str, ...] = (TOTAL, BASE, COORD, ACHIEVEMENT)
# What `report` analyses when no --metric is given.
DEFAULT_METRIC = TOTAL

# The unit of every machine output's metric values (see the module docstring).
UNITS = "fraction"
UNITS_NOTE = (
    "fraction metrics (Team/*_pct*: Total, Base, Coord, Ach) are fractions in [0, 1] "
    "(x100 for percent, as tables show them); other columns as compute_score logs them"
)


def units_fields() -> dict[str, str]:
    """The ``units`` / ``units_note`` fields of a JSON document holding metric values."""
    return {"units": UNITS, "units_note": UNITS_NOTE}


_KNOWN = {m.key: m for m in METRICS}
_FRACTION_KEY = re.compile(r"^(Team|Agent\d+)/\w*_pct(_of_max)?$")


def metric_info(key: str) -> MetricInfo:
    """The description of a metric column (fractions recognised by their name)."""
    if key in _KNOWN:
        return _KNOWN[key]
    return MetricInfo(key, key, key, bool(_FRACTION_KEY.match(key)))


def resolve_metric(name: str, available: Iterable[str]) -> str:
    """A metric key from a key, a label ("Total%") or an alias ("total"); else UsageError."""
    avail = list(dict.fromkeys(available))
    if name in avail:
        return name
    low = name.strip().lower()
    for m in METRICS:
        if low in (m.key.lower(), m.label.lower(), m.label.lower().rstrip("%"), *m.aliases):
            if m.key in avail:
                return m.key
            raise UsageError(f"metric {m.key!r} ({m.label}) is not in the selected results")
    for a in avail:
        if a.lower() == low:
            return a
    close = difflib.get_close_matches(name, avail, n=3, cutoff=0.5)
    hint = (
        f"; did you mean {', '.join(close)}?"
        if close
        else "; try total, base, coord, achievement or a column such as Team/achievement_pct"
    )
    raise UsageError(f"unknown metric {name!r}{hint}")


def pick_metrics(names: str | Iterable[str] | None, among: Iterable[str]) -> tuple[str, ...]:
    """The keys of ``among`` that ``names`` (keys, labels, names or aliases: ``"total"``,
    ``"Total%"``) pick, in their order (None: all of ``among``); else one UsageError."""
    keys = tuple(among)
    if names is None:
        return keys
    chosen = [names] if isinstance(names, str) else list(names)
    choices = ", ".join(metric_info(k).name.lower() for k in keys)
    if not chosen:
        raise UsageError(f"no metric chosen: choose among {choices}")
    out = []
    for name in chosen:
        try:
            out.append(resolve_metric(name, keys))
        except UsageError:
            raise UsageError(f"unknown metric {name!r} here: choose among {choices}") from None
    return tuple(dict.fromkeys(out))
