"""The options several commands share, each defined once (typer ``Annotated`` aliases).

A command declares ``source: SourceOpt = "hub"``; the flag and its help text live here, and
every flag two commands share is declared here once (``tests/test_options.py`` walks every
registered command's options and fails on a second declaration). Each command sets its own
default (the parameter's default). Where a command's help must say more (what its ``--out``
holds, its own default), it keeps the shared declaration and overrides only the help:
``out: Annotated[Path, override(OutDirOpt, help="...")] = Path("x")`` (:func:`override`;
the flag, parser and metavar stay the shared ones). Keep that rare.
:func:`open_cli_source` opens the source the source options name.

Choice options are :class:`enum.StrEnum` s (``OutputFormat`` is :mod:`alem_eval.cli.console`'s),
so ``--help`` lists the choices; a value that is not a choice is a one-line
:class:`~alem_eval.core.errors.UsageError` (exit 2), like every other input error. Commands hand
the library plain strings (``protocol.value``).

This module stays light (no JAX, pandas or Hub client): every command imports it when the
CLI starts. ``tests/test_options.py`` checks that the choices equal the library's.
"""

from __future__ import annotations

from pathlib import Path
import copy
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer
from typer.models import OptionInfo

if TYPE_CHECKING:
    from alem_eval.hub.source_base import Source

from alem_eval.cli.choices import (
    choice,
    CiMethod,
    DatasetFormat,
    Difficulty,
    EnvMismatch,
    ExportFormat,
    LeaderboardFormat,
    PaperFormat,
    Prefer,
    Protocol,
    Runs,
    Split,
    TeamRuns,
)
from alem_eval.cli.console import OutputFormat


_OVERRIDES: dict[int, tuple[OptionInfo, OptionInfo]] = {}  # id(variant) -> (variant, shared)


def override(alias: Any, *, help: str | None = None) -> OptionInfo:
    """The shared option ``alias`` (one of this module's ``...Opt`` aliases) for a command
    whose help says more: a copy of its ``typer.Option`` with this ``help`` (None: the
    shared one itself, for a command that only types the value differently). Use it as
    ``Annotated[<type>, override(alias, help=...)]``."""
    shared = alias.__metadata__[0]
    if help is None:
        return shared
    variant = copy.copy(shared)
    variant.help = help
    _OVERRIDES[id(variant)] = (variant, shared)
    return variant


def shared_declaration(info: Any) -> OptionInfo | None:
    """The declaration in this module that the ``typer.Option`` ``info`` is (itself, or the
    one :func:`override` copied), else None: a command's own option."""
    if id(info) in _OVERRIDES:
        info = _OVERRIDES[id(info)][1]
    return info if any(info is d for d in declarations().values()) else None


def declarations() -> dict[str, OptionInfo]:
    """Every shared option declared here: alias name -> its ``typer.Option``."""
    return {
        name: value.__metadata__[0]
        for name, value in globals().items()
        if name.endswith("Opt")
        and isinstance(getattr(value, "__metadata__", (None,))[0], OptionInfo)
    }


def split_commas(values: list[str] | None) -> list[str] | None:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``; None when nothing was given."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


# ----------------------------------------------------------------------------------------
# Where cells come from
# ----------------------------------------------------------------------------------------
SourceOpt = Annotated[
    str,
    typer.Option(
        "--source",
        help="'hub', 'demo' or a local directory in the released layout: a cell at a "
        "path like 1B/ippo-rnn/hard/seed0 holding checkpoint/ and config.json.",
    ),
]
SourcePairOpt = Annotated[
    list[str],
    typer.Option(
        "--source",
        help="Exactly two sources, A then B: 'hub', 'demo' or a local directory in "
        "the released layout (e.g. your runs).",
    ),
]
RepoOpt = Annotated[
    str | None, typer.Option("--repo", help="Hub repo id (default alem-world/alem-rl-baselines).")
]
RevisionOpt = Annotated[
    str | None,
    typer.Option("--revision", help="Hub revision: a branch, tag or commit (default main)."),
]
CacheDirOpt = Annotated[
    Path | None,
    typer.Option("--cache-dir", help="Download cache (default: the Hugging Face cache)."),
]


def open_cli_source(
    source: str,
    repo: str | None,
    revision: str | None,
    cache_dir: Path | None,
    *,
    read_only: bool = False,
) -> Source:
    """The source ``--source``, ``--repo``, ``--revision`` and ``--cache-dir`` name; what it
    downloads shows as the download bar on stderr when that is a terminal."""
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.sources import open_source

    return open_source(
        source,
        repo=repo,
        revision=revision,
        cache_dir=cache_dir,
        read_only=read_only,
        on_download=download_bar(),
    )


BudgetFilterOpt = Annotated[
    list[str] | None,
    typer.Option("--budget", help="Filter: budget(s), e.g. 1B; repeat or comma-separate."),
]
AlgorithmFilterOpt = Annotated[
    list[str] | None,
    typer.Option("--algorithm", help="Filter: algorithm(s); repeat or comma-separate."),
]
DifficultyFilterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--difficulty",
        help="Filter: the cells' training difficulty(ies); repeat or comma-separate.",
    ),
]
SplitOpt = Annotated[
    Split | None,
    typer.Option(
        "--split",
        help="Only the cells of this frozen partner split (the release's, or --splits "
        "FILE's): train, val or test (test is for final numbers only).",
        **choice(Split, "--split", "split"),
    ),
]
SplitsFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--splits",
        help="A split file of your own (JSON: population -> train/val/test seeds) instead "
        "of the release's.",
    ),
]


def source_keywords(
    source: str,
    repo: str | None,
    revision: str | None,
    cache_dir: Path | None,
    difficulty: list[str] | None,
) -> dict[str, Any]:
    """The public API's ``source``, ``repo``, ``revision``, ``cache_dir`` and
    ``difficulty`` (a list) from ``--source``, ``--repo``, ``--revision``, ``--cache-dir``
    and ``--difficulty`` (crossplay, scenario, render)."""
    return {
        "source": source,
        "repo": repo,
        "revision": revision,
        "cache_dir": cache_dir,
        "difficulty": split_commas(difficulty),
    }


def team_keywords(
    split: Split | None,
    splits: Path | None,
    on_env_mismatch: EnvMismatch,
    batch: int | None,
    devices: str | None,
    record: Path | None,
) -> dict[str, Any]:
    """The keywords :func:`alem_eval.crossplay` and :func:`alem_eval.scenario` take from
    the options their commands share (``--split``, ``--splits``, ``--on-env-mismatch``,
    ``--batch``, ``--devices``, ``--record``), with the episode bar on (``progress``)."""
    return {
        "split": split.value if split else None,
        "splits": splits,
        "on_env_mismatch": on_env_mismatch.value,
        "batch": batch,
        "devices": devices,
        "record": record,
        "progress": True,
    }


def split_cells(cells: list, split: Split | None, splits_file: Path | None) -> list:
    """The selected ``cells`` of ``--split`` in the release's or ``--splits``' splits
    (:func:`alem_eval.hub.splits.select_split`; a ``--splits`` file is checked even
    without ``--split``)."""
    if split is None and splits_file is None:
        return cells
    from alem_eval.hub.splits import load_splits, select_split

    return select_split(cells, split.value if split else None, load_splits(splits_file))


EvalDifficultyOpt = Annotated[
    Difficulty | None,
    typer.Option(
        "--eval-difficulty",
        help="Play every cell on this difficulty's worlds (default: each cell's own "
        "training difficulty; with --protocol reference, the EVAL_DIFFICULTIES its run "
        "evaluated).",
        **choice(Difficulty, "--eval-difficulty", "eval difficulty"),
    ),
]
# --eval-difficulty's help for the commands without --protocol (crossplay, scenario, render):
# ``override(EvalDifficultyOpt, help=EVAL_DIFFICULTY_SHARED_HELP)``.
EVAL_DIFFICULTY_SHARED_HELP = (
    "Play on this difficulty's worlds (default: the cells' training difficulty, which they "
    "must then share)."
)

FocalOpt = Annotated[
    str | None,
    typer.Option(
        "--focal",
        help="Your agent: package.module:factory, path/to/file.py:factory, a "
        "reference agent (random-legal, noop, scripted, scripted-host), or a cell "
        "directory (checkpoint/ + config.json: its greedy policy).",
        metavar="SPEC|PATH",
    ),
]
FocalArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--focal-arg",
        help="KEY=VALUE keyword argument of the factory (repeatable; JSON values).",
        metavar="KEY=VALUE",
    ),
]

DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Only show the plan: the cells, the files and bytes to download, the episodes "
        "and at most how many env steps; nothing is downloaded, run or written.",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])

QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        help="No progress on stderr (bars, progress lines); warnings, errors and the "
        "result still print.",
    ),
]


def quiet_option(command: F) -> F:
    """A command with a ``quiet: QuietOpt`` parameter runs inside
    :func:`alem_eval.core.progress.quiet_progress` when it is set (put the decorator
    under ``@app.command``)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from alem_eval.core.progress import quiet_progress

        with quiet_progress(bool(kwargs.get("quiet"))):
            return command(*args, **kwargs)

    return cast(F, run)


# ----------------------------------------------------------------------------------------
# Scoring and the results store
# ----------------------------------------------------------------------------------------
ResultsOpt = Annotated[
    Path | None,
    typer.Option(
        "--results",
        help="Results store directory (default: <user cache>/results, the user "
        "cache being $ALEM_EVAL_CACHE, else ~/.cache/alem-eval).",
    ),
]
FreshOpt = Annotated[
    bool,
    typer.Option(
        "--fresh", help="Start over: what an earlier run kept (resume state, results) is redone."
    ),
]
ProtocolOpt = Annotated[
    Protocol,
    typer.Option(
        "--protocol",
        help="fast: the paper protocol, every episode in parallel; reference: "
        "upstream's sequential key chain, bit for bit.",
        **choice(Protocol, "--protocol", "protocol"),
    ),
]
ResultsProtocolOpt = Annotated[
    Protocol | None,
    typer.Option(
        "--protocol",
        help="Scoring protocol to read when the results hold several.",
        **choice(Protocol, "--protocol", "protocol"),
    ),
]
EnvMismatchOpt = Annotated[
    EnvMismatch,
    typer.Option(
        "--on-env-mismatch",
        help="When a cell's env version differs from the installed "
        "alem-env: stop (error) or score anyway with a warning (warn).",
        **choice(EnvMismatch, "--on-env-mismatch", "env-version policy"),
    ),
]

# ----------------------------------------------------------------------------------------
# Output and statistics
# ----------------------------------------------------------------------------------------
FormatOpt = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        help="table (for people), json or csv (for programs).",
        **choice(OutputFormat, "--format", "format"),
    ),
]
PaperFormatOpt = Annotated[
    PaperFormat,
    typer.Option(
        "--format",
        help="table (for people), md or latex (the paper table, in percent), json or csv "
        "(fractions, for programs).",
        **choice(PaperFormat, "--format", "format", metavar="FORMAT"),
    ),
]
LeaderboardFormatOpt = Annotated[
    LeaderboardFormat,
    typer.Option(
        "--format",
        help="md, csv, latex (booktabs) or json (the upstream leaderboard entry schema).",
        **choice(LeaderboardFormat, "--format", "format"),
    ),
]
ExportFormatOpt = Annotated[
    ExportFormat,
    typer.Option(
        "--format",
        help="marl-eval (instadeepai/marl-eval raw-data JSON).",
        **choice(ExportFormat, "--format", "format"),
    ),
]
DatasetFormatOpt = Annotated[
    DatasetFormat,
    typer.Option(
        "--format",
        help="vault: Flashbax Vaults in OG-MARL's experience structure.",
        **choice(DatasetFormat, "--format", "dataset format"),
    ),
]
RepsOpt = Annotated[int, typer.Option("--reps", help="Bootstrap replicates.")]
SeedOpt = Annotated[
    int,
    typer.Option("--seed", help="Bootstrap seed: the same seed reproduces every interval exactly."),
]
RunsOpt = Annotated[
    Runs,
    typer.Option(
        "--runs",
        help="seeds: each seed's mean over its episodes is a run; episodes: every "
        "episode is a run.",
        **choice(Runs, "--runs", "run unit"),
    ),
]
CiOpt = Annotated[
    CiMethod,
    typer.Option(
        "--ci",
        help="expanded: the percentile interval widened for the number of seeds (covers "
        "its 95% label from 3 seeds on); percentile: rliable's plain percentile interval, "
        "for parity with papers that used it (narrower than its label with few seeds).",
        **choice(CiMethod, "--ci", "interval"),
    ),
]
PreferOpt = Annotated[
    Prefer,
    typer.Option(
        "--prefer",
        help="On a same-key content conflict keep ours or theirs.",
        **choice(Prefer, "--prefer", "side"),
    ),
]
RunsTeamsOpt = Annotated[
    TeamRuns,
    typer.Option(
        "--runs",
        help="How the gap averages: teams: every cross-play team weighs the same; "
        "episodes: every (team, episode) with a finite value does (the two differ only "
        "when values are missing). Either way the CI resamples the worlds (episode "
        "indices), jointly for every team and the self-play.",
        **choice(TeamRuns, "--runs", "run unit"),
    ),
]
MetricsOpt = Annotated[
    list[str] | None,
    typer.Option("--metric", help="Metric(s): a results column or a short name. Repeatable."),
]

# ----------------------------------------------------------------------------------------
# Episodes
# ----------------------------------------------------------------------------------------
EpisodesOpt = Annotated[int | None, typer.Option("--episodes", help="Episodes per cell.")]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-steps", help="Step cap per episode (default: the protocol's, 10000 for fast)."
    ),
]
BatchOpt = Annotated[
    int | None,
    typer.Option(
        "--batch",
        help="Batch slots of the compiled rollout, shared out over the call's teams "
        "(default: 64 per core on a CPU, 4096 on a GPU, and at least 8 per team or all "
        "its episodes). A slot whose episode ended takes its team's next episode at the "
        "next step, inside the compiled loop; fewer slots bound memory and shorten the "
        "idle tail, more vectorise further.",
    ),
]
RecordOpt = Annotated[
    Path | None,
    typer.Option(
        "--record",
        help="Also record every evaluated step (observations, legal actions, actions, "
        "rewards, dones, team achievements) into this directory, streamed in compressed "
        "chunks as the rollout runs; 'alem-eval dataset export' turns it into Flashbax "
        "vaults. A rerun completes an interrupted recording; episodes there that another "
        "checkpoint, config, --max-steps or env version made are recorded again (a "
        "warning says what differs).",
    ),
]
DevicesOpt = Annotated[
    str | None,
    typer.Option(
        "--devices",
        help="CPU: split the batch over N host devices, one per core with 'auto' (the "
        "Alem step is single-threaded, so this scales with cores). 'reference' numbers "
        "are identical however they are split; 'fast' ones may differ in rare near-ties, "
        "so leave it unset for numbers that must not depend on the core count.",
    ),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="i/N: only the i-th (0-based) of N contiguous shares of the selected cells "
        "(e.g. one SLURM array task each).",
    ),
]
ClipsOpt = Annotated[
    bool,
    typer.Option(
        "--clips",
        help="Also draw a short self-play GIF per algorithm (episode 0 of its first cell) "
        "into clips/ and embed it in the report (a render program compiles per algorithm: "
        "minutes on a CPU).",
    ),
]

# ----------------------------------------------------------------------------------------
# Where outputs go
# ----------------------------------------------------------------------------------------
OutDirOpt = Annotated[Path, typer.Option("--out", help="Output directory.")]
OutFileOpt = Annotated[
    Path | None, typer.Option("--out", help="Write to this file instead of stdout.")
]
