"""The choices of the CLI's choice options (:class:`enum.StrEnum` s, so ``--help`` lists
them) and :func:`choice`, the ``typer.Option`` keywords that parse one into a one-line
usage error. The options themselves are declared in :mod:`alem_eval.cli.options`;
``tests/test_options.py`` checks that the choices equal the library's.
"""

from __future__ import annotations

from enum import StrEnum

from alem_eval.cli.console import OutputFormat
from alem_eval.core.errors import UsageError


# ----------------------------------------------------------------------------------------
# Choices
# ----------------------------------------------------------------------------------------
class Protocol(StrEnum):
    """``alem_eval.evaluate.settings.PROTOCOLS``."""

    fast = "fast"
    reference = "reference"


class EnvMismatch(StrEnum):
    """What ``score`` does when a cell's env version is not the installed one."""

    error = "error"
    warn = "warn"


class Runs(StrEnum):
    """``alem_eval.analysis.bootstrap.RUNS_MODES``: what one run of the analysis is."""

    seeds = "seeds"
    episodes = "episodes"


class CiMethod(StrEnum):
    """``alem_eval.analysis.bootstrap.CI_METHODS``: the interval of the bootstrap."""

    expanded = "expanded"
    percentile = "percentile"


class LeaderboardFormat(StrEnum):
    """``alem_eval.reporting.leaderboard.FORMATS``."""

    md = "md"
    csv = "csv"
    latex = "latex"
    json = "json"


class ExportFormat(StrEnum):
    marl_eval = "marl-eval"


class DatasetFormat(StrEnum):
    """``alem_eval.datasets.vault.VAULT_FORMATS``."""

    vault = "vault"


class Difficulty(StrEnum):
    """``alem_eval.algorithms.config.DIFFICULTIES``: the worlds ``--eval-difficulty`` plays."""

    easy = "easy"
    medium = "medium"
    hard = "hard"


class Split(StrEnum):
    """``alem_eval.hub.splits.SPLITS``: the frozen partner splits."""

    train = "train"
    val = "val"
    test = "test"


class PaperFormat(StrEnum):
    """:class:`~alem_eval.cli.console.OutputFormat` plus the paper tables (``md``,
    ``latex``: :class:`alem_eval.core.tables.PaperTable`)."""

    table = "table"
    json = "json"
    csv = "csv"
    md = "md"
    latex = "latex"

    @property
    def records(self) -> OutputFormat:
        """What :func:`~alem_eval.cli.console.emit_records` prints for it (md, latex: table)."""
        return OutputFormat(self.value) if self.value in {"json", "csv"} else OutputFormat.table


class TeamRuns(StrEnum):
    """``alem_eval.scoring.crossplay.RUNS_MODES``: how crossplay's gap averages (a cross-play
    run is a team, not a seed as in :class:`Runs`)."""

    teams = "teams"
    episodes = "episodes"


class Prefer(StrEnum):
    """Which side ``merge`` keeps on a same-key content conflict."""

    ours = "ours"
    theirs = "theirs"


def choice(enum: type[StrEnum], flag: str, noun: str, *, metavar: str | None = None) -> dict:
    """``typer.Option`` keywords for a choice: the parser (one-line usage error naming the
    choices) and the metavar that shows them in ``--help`` (``metavar`` instead where the
    help names them: a long list widens the column and squeezes every option's help)."""
    names = [m.value for m in enum]

    def parse(value):
        if isinstance(value, enum):
            return value
        try:
            return enum(value)
        except ValueError:
            raise UsageError(
                f"unknown {noun} {value!r}: {flag} must be one of {', '.join(names)}"
            ) from None

    return {"parser": parse, "metavar": metavar or "[" + "|".join(names) + "]"}
