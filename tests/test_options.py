"""Shared CLI options: declared once (alem_eval/cli/options.py), choices listed in --help and
equal to what the library accepts, a wrong choice a one-line usage error."""

from __future__ import annotations

import importlib
import inspect

import pytest
from typer.testing import CliRunner

from alem_eval.analysis import bootstrap

from alem_eval.datasets import vault as datasets
from alem_eval.scoring import crossplay

from alem_eval.evaluate.settings import ENV_MISMATCH_POLICIES, PROTOCOLS

from alem_eval.cli import options
from alem_eval.algorithms.config import DIFFICULTIES
from alem_eval.reporting.leaderboard import FORMATS as LEADERBOARD_FORMATS
from alem_eval.cli.app import COMMAND_MODULES, _register, app, main
from alem_eval.cli.console import OutputFormat
from alem_eval.core.errors import UsageError
from alem_eval.analysis.interop import merge_results
from alem_eval.analysis.results import ResultsStore
from alem_eval.analysis.result_keys import ResultsError


def _declarations():
    """(command, flag, typer OptionInfo) for every option of every registered command,
    subcommands (dataset export, ...) included: the click tree typer builds, each option
    traced back to the ``typer.Option`` its function declared."""
    import typing

    import typer

    _register()
    found = []

    def walk(cmd, path: str) -> None:  # typer's own (vendored) click classes
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())
            return
        func = inspect.unwrap(cmd.callback)
        hints = typing.get_type_hints(func, include_extras=True)
        defaults = {n: p.default for n, p in inspect.signature(func).parameters.items()}
        for param in cmd.params:
            if param.param_type_name != "option":
                continue
            meta = getattr(hints.get(param.name), "__metadata__", ())
            infos = [m for m in meta if isinstance(m, typer.models.OptionInfo)]
            info = infos[0] if infos else defaults[param.name]
            assert isinstance(info, typer.models.OptionInfo), (path, param.name)
            for flag in [*param.opts, *param.secondary_opts]:
                found.append((path, flag, info))

    walk(typer.main.get_command(app), "")
    return found


def test_every_command_is_walked():
    commands = {c for c, _, _ in _declarations()}
    assert {"score", "crossplay", "train", "dataset export", "render", "demo", "merge"} <= commands
    assert len(commands) == len(COMMAND_MODULES) + 2  # merge (export.py), dataset info


def test_every_flag_two_commands_share_is_declared_once_in_the_options_module():
    """A flag of two or more commands (``--out`` was declared 8 times) is one of
    ``alem_eval.cli.options``'s declarations everywhere (a command may override its help
    with ``options.override``); and no command declares a shared flag of its own."""
    by_flag: dict[str, list[tuple[str, object]]] = {}
    for command, flag, info in _declarations():
        by_flag.setdefault(flag, []).append((command, info))
    shared_flags = {flag for info in options.declarations().values() for flag in info.param_decls}
    own = sorted(
        f"{command} {flag}"
        for flag, uses in by_flag.items()
        if len(uses) > 1 or flag in shared_flags
        for command, info in uses
        if options.shared_declaration(info) is None
    )
    assert own == [], f"declared outside alem_eval.cli.options: {own}"


def test_an_override_changes_the_help_only():
    variant = options.override(options.OutDirOpt, help="Where it goes.")
    shared = options.OutDirOpt.__metadata__[0]
    assert variant.help == "Where it goes." and shared.help == "Output directory."
    assert variant.param_decls == shared.param_decls
    assert options.shared_declaration(variant) is shared
    assert options.override(options.OutDirOpt) is shared
    import typer

    assert options.shared_declaration(typer.Option("--out", help="Elsewhere.")) is None


def _values(enum) -> tuple[str, ...]:
    return tuple(m.value for m in enum)


def test_choices_are_what_the_library_accepts(tmp_path):
    assert _values(options.Protocol) == PROTOCOLS
    assert set(_values(options.EnvMismatch)) <= set(ENV_MISMATCH_POLICIES)
    assert _values(options.Runs) == bootstrap.RUNS_MODES
    assert _values(options.CiMethod) == bootstrap.CI_METHODS
    assert _values(options.LeaderboardFormat) == LEADERBOARD_FORMATS
    assert _values(options.Difficulty) == DIFFICULTIES
    assert options.OutputFormat is OutputFormat
    assert _values(options.DatasetFormat) == datasets.VAULT_FORMATS
    assert _values(options.TeamRuns) == crossplay.RUNS_MODES
    for side in options.Prefer:  # accepted: it gets as far as the missing directory
        with pytest.raises(ResultsError, match="no results directory"):
            merge_results(
                ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b"), prefer=side.value
            )


@pytest.mark.parametrize(
    "command, choices",
    [
        ("score", ["[fast|reference]", "[error|warn]", "[table|json|csv]"]),
        ("report", ["[seeds|episodes]", "[fast|reference]", "[expanded|percentile]"]),
        ("leaderboard", ["[md|csv|latex|json]", "[expanded|percentile]"]),
        ("compare", ["[expanded|percentile]"]),
        ("merge", ["[ours|theirs]", "[table|json|csv]"]),
        ("export", ["[marl-eval]"]),
    ],
)
def test_help_lists_the_choices(command, choices):
    _register()
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for c in choices:
        assert c in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["score", "--protocol", "slow"],
            "unknown protocol 'slow': --protocol must be one of fast, reference",
        ),
        (
            ["list", "--format", "xml"],
            "unknown format 'xml': --format must be one of table, json, csv",
        ),
        (
            ["score", "--on-env-mismatch", "ignore"],
            "unknown env-version policy 'ignore': --on-env-mismatch must be one of error, warn",
        ),
        (
            ["merge", "x", "--prefer", "mine"],
            "unknown side 'mine': --prefer must be one of ours, theirs",
        ),
    ],
)
def test_a_wrong_choice_is_a_one_line_usage_error(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == f"alem-eval: error: {message}"


PLAYING_COMMANDS = ("score", "compare", "crossplay", "render")


@pytest.mark.parametrize("command", PLAYING_COMMANDS)
def test_commands_that_play_take_difficulty_as_a_filter_and_eval_difficulty_once(command):
    """--difficulty selects cells (as list does), --eval-difficulty sets the worlds: both
    the options module's aliases."""
    import typing

    func = importlib.import_module(f"alem_eval.cli.commands.{command}")
    hints = typing.get_type_hints(getattr(func, command), include_extras=True)
    assert hints["difficulty"] == options.DifficultyFilterOpt
    [info] = hints["eval_difficulty"].__metadata__  # the shared option, or its help overridden
    assert options.shared_declaration(info) is options.EvalDifficultyOpt.__metadata__[0]


def test_an_options_help_names_only_flags_its_command_has():
    """``--eval-difficulty``'s shared help speaks of ``--protocol reference``: commands
    without --protocol (crossplay, scenario, render) say it without."""
    import re

    declared = _declarations()
    flags: dict[str, set[str]] = {}
    for command, flag, _ in declared:
        flags.setdefault(command, set()).add(flag)
    wrong = sorted(
        f"{command} {flag}: {named}"
        for command, flag, info in declared
        for named in re.findall(r"(?<![\w-])--[a-z][a-z-]*", info.help or "")
        if named not in flags[command]
    )
    assert wrong == []


@pytest.mark.parametrize("command", PLAYING_COMMANDS)
def test_a_wrong_eval_difficulty_is_a_one_line_usage_error(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "x", "--eval-difficulty", "extreme"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip() == (
        "alem-eval: error: unknown eval difficulty 'extreme': --eval-difficulty must be one "
        "of easy, medium, hard"
    )


def test_choice_parser_accepts_the_same_strings_as_before():
    parse = options.choice(options.Protocol, "--protocol", "protocol")["parser"]
    assert parse("reference") is options.Protocol.reference == "reference"
    assert parse(options.Protocol.fast) is options.Protocol.fast
    with pytest.raises(UsageError):
        parse("Reference")
    assert options.split_commas(["easy,hard", " medium "]) == ["easy", "hard", "medium"]
    assert options.split_commas(None) is None
