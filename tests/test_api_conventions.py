"""ONE API: what every public function of ``alem_eval`` does alike, and the table of them
in docs/python-api.md.

Cells (or selectors) come first; the results store is ``store=``; old spellings still
work for one release with a DeprecationWarning; a ``Cell`` never silently drops a
``source=`` naming another source; every result has ``to_frame()`` and ``to_json()``;
progress goes through the same callbacks in a terminal, in Jupyter and under
``--quiet``. Nothing here compiles the Alem step (the evaluator is stubbed where a
function would play).
"""

from __future__ import annotations

import inspect
import json
import re
import warnings

import pandas as pd
import pytest

import alem_eval
from alem_eval.core.errors import UsageError

from .conftest import FIXTURES, REPO
from .synthetic import fill_store, synthetic_scenario

# The public functions whose first parameter is not cells: what they take instead.
NOT_CELLS = {
    "select": "selectors",
    "load_policy": "cell",
    "make_env": "cell_or_difficulty",
    "parallel_env": "cell_or_difficulty",
    "verify_results": "path",
    "enable_compilation_cache": "directory",
}
# What every result class of the API holds besides its data.
RESULTS = ("Pull", "Comparison", "Report", "Export", "Merge", "CrossPlay", "Scenario")
RESULTS += ("Rendered", "Training", "Leaderboard", "VerifyReport")


def _functions() -> dict[str, object]:
    return {
        n: getattr(alem_eval, n)
        for n in alem_eval.__all__
        if inspect.isfunction(getattr(alem_eval, n))
    }


def test_every_function_takes_its_cells_first_and_the_results_store_as_store():
    for name, fn in _functions().items():
        params = list(inspect.signature(fn).parameters.values())
        assert params[0].name == NOT_CELLS.get(name, "cells"), name
        names = {p.name for p in params}
        assert "results" not in names and "num_episodes" not in names, name
        assert not ({"source", "repo", "revision"} & names) or name in (
            "select", "pull", "verify", "score", "crossplay", "scenario", "render",
            "load_policy", "train", "make_env", "parallel_env",
        ), name  # fmt: skip
    for name in ("score", "results", "leaderboard", "report", "crossplay", "scenario"):
        assert "store" in inspect.signature(getattr(alem_eval, name)).parameters, name


def test_old_spellings_still_work_for_one_release_with_a_deprecation_warning(tmp_path):
    store = tmp_path / "results"
    from alem_eval.analysis.results import ResultsStore

    fill_store(ResultsStore(store), budgets=["1B"], difficulties=["easy"], seeds=[0, 1])
    new = alem_eval.results(["1B/ippo-rnn", "1B/pqn"], store=store)
    with pytest.warns(DeprecationWarning, match=r"results\(results=\.\.\.\) is now store="):
        old = alem_eval.results(["1B/ippo-rnn", "1B/pqn"], results=store)
    pd.testing.assert_frame_equal(old, new)
    with pytest.warns(DeprecationWarning, match=r"several positional selectors") as seen:
        two = alem_eval.results("1B/ippo-rnn", "1B/pqn", store=store)
    assert seen[0].filename == __file__  # the warning names the caller's line
    pd.testing.assert_frame_equal(two, new)
    with pytest.warns(DeprecationWarning):
        board = alem_eval.leaderboard("1B/ippo-rnn", "1B/pqn", results=store, reps=100)
    assert board.to_frame().equals(
        alem_eval.leaderboard(new["cell"], store=store, reps=100).to_frame()
    )
    with pytest.raises(UsageError, match="give store= only"):
        alem_eval.results(store=store, results=store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spellings warn about nothing
        alem_eval.leaderboard(["1B/ippo-rnn"], store=store, reps=100)


def test_scenario_takes_the_cells_first_and_the_old_order_swaps_with_a_warning(monkeypatch):
    from alem_eval.scoring import scenario as library

    seen = []

    def run_scenario(source, cells, focal, **kwargs):
        seen.append(([c.id for c in cells], focal, kwargs))
        return synthetic_scenario()

    monkeypatch.setattr(library, "run_scenario", run_scenario)
    new = alem_eval.scenario("demo/ippo", "random-legal", source="demo", progress=False)
    with pytest.warns(DeprecationWarning, match=r"scenario\(focal, cells\) is now"):
        alem_eval.scenario("random-legal", "demo/ippo", source="demo", progress=False)
    with pytest.warns(DeprecationWarning):
        alem_eval.scenario("examples/agents.py:explorer", ["demo/ippo"], source="demo")
    assert [s[:2] for s in seen] == [
        (["demo/ippo-rnn/easy/seed0"], "random-legal"),
        (["demo/ippo-rnn/easy/seed0"], "random-legal"),
        (["demo/ippo-rnn/easy/seed0"], "examples/agents.py:explorer"),
    ]
    assert new.to_frame().equals(new.teams) and len(new.to_frame()) == len(new.result.teams)
    assert new.to_frame().attrs["units"] == "fraction"


def test_crossplay_and_scenario_plan_with_dry_run_from_the_cells_a_command_would_play(tmp_path):
    """``dry_run=True`` returns the plan (nothing played, nothing written); no selector
    takes every cell of a local source, ``difficulty`` keeps those of that training
    difficulty, as ``--difficulty`` does; a focal object is named by its class."""
    from alem_eval.evaluate.reference_agents import RandomLegal
    from alem_eval.scoring.plan import RunPlan

    where = {"source": str(FIXTURES), "store": tmp_path / "store", "out": tmp_path / "out"}
    plan = alem_eval.crossplay([], difficulty="easy", episodes=2, dry_run=True, **where)
    assert isinstance(plan, RunPlan) and plan.command == "crossplay"
    easy = [c.id for c in alem_eval.select(source=str(FIXTURES)) if c.difficulty == "easy"]
    assert [r.cell for r in plan.cells] == easy and len(easy) > 1
    agent = RandomLegal()
    seen = alem_eval.scenario(easy[:1], agent, max_steps=9, dry_run=True, **where)
    assert isinstance(seen, RunPlan) and [r.cell for r in seen.cells] == easy[:1]
    assert seen.teams == 1 + 2 * 3  # its self-play, the focal in each slot as a visitor, resident
    assert list(tmp_path.iterdir()) == []  # no results store, no outputs


def test_before_compiling_turns_the_cache_on_always_inside_a_command(monkeypatch):
    """Outside a command, a cache variable of JAX's own is the caller's choice; a command of
    the CLI (which calls the API inside ``a_command``) turns the cache on all the same."""
    from alem_eval.api.calls import a_command, before_compiling
    from alem_eval.core import runtime

    calls = []
    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda: calls.append(1))
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/somewhere/else")
    before_compiling()
    assert calls == []
    with a_command():
        before_compiling()
    assert calls == [1]
    before_compiling()
    assert calls == [1]


def test_a_commands_run_keeps_the_results_stores_warnings_for_the_command(monkeypatch):
    """Inside ``a_command`` (``alem-eval crossplay`` / ``scenario``) the results store's
    warnings of the run are kept, one line each, for the command to print after the
    tables; a researcher's call warns as usual."""
    from alem_eval.analysis.results import ResultsWarning
    from alem_eval.api.calls import a_command
    from alem_eval.api.teams import Where, play_teams
    from alem_eval.core import runtime

    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda: None)

    def run(source, cells, *, on_progress, on_episodes):
        warnings.warn("a stored\n   row differs", ResultsWarning, stacklevel=2)
        return [c.id for c in cells]

    where = Where(source=str(FIXTURES), difficulty="hard")
    args = ("crossplay", "tiny/ippo-rnn", where, None, run, None, None, False, False)
    with a_command() as notes, warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing else warns
        played, outputs = play_teams(*args)
    assert notes == ["a stored row differs"] and outputs == ()
    assert played == ["tiny/ippo-rnn/hard/seed2"]
    with pytest.warns(ResultsWarning, match="row differs"):
        play_teams(*args)


def test_cells_keep_their_source_and_a_source_naming_another_is_one_line():
    demo = alem_eval.select("demo/ippo", source="demo")
    assert alem_eval.pull(demo, source="demo").root == alem_eval.pull(demo).root  # the same
    with pytest.raises(UsageError, match=r"source='hub': the Cells were selected from demo"):
        alem_eval.pull(demo, source="hub")
    with pytest.raises(UsageError, match=r"revision='v2': the Cells were selected from demo"):
        alem_eval.verify(demo, revision="v2")
    tiny = alem_eval.select("tiny/pqn", source=str(FIXTURES))
    assert alem_eval.pull(tiny, source=FIXTURES).cells == alem_eval.pull(tiny).cells
    with pytest.raises(UsageError, match="a Cell keeps its source"):
        alem_eval.pull(tiny, source="demo")


def test_every_result_has_to_frame_and_to_json():
    from alem_eval.api import crossplay, functions, render, scenario, stored, training

    modules = (functions, stored, crossplay, scenario, render, training)
    classes = {n: getattr(m, n) for m in modules for n in RESULTS if hasattr(m, n)}
    classes.update(Leaderboard=alem_eval.Leaderboard, VerifyReport=alem_eval.VerifyReport)
    assert set(classes) == set(RESULTS)
    for name, cls in classes.items():
        assert callable(getattr(cls, "to_frame", None)), name
        assert callable(getattr(cls, "to_json", None)), name


def test_export_merge_and_train_return_frames_and_json_as_their_commands_do(tmp_path):
    from alem_eval.analysis.results import ResultsStore

    ours, theirs = ResultsStore(tmp_path / "ours"), ResultsStore(tmp_path / "theirs")
    fill_store(theirs, budgets=["1B"], difficulties=["easy"], seeds=[0, 1], num_episodes=3)
    merged = alem_eval.merge(["1B/ippo-rnn"], other=theirs.root, store=ours.root)
    frame = merged.to_frame()
    assert set(frame["action"]) == {"copied"} and set(frame["cell"]) == {
        "1B/ippo-rnn/easy/seed0",
        "1B/ippo-rnn/easy/seed1",
    }
    assert json.loads(json.dumps(merged.to_json()))["summary"].startswith("copied 2 new")
    exported = alem_eval.export(store=ours.root, out=tmp_path / "marl.json")
    assert exported.to_json() == json.loads((tmp_path / "marl.json").read_text())
    assert set(exported.to_frame()["seed"]) == {"seed_0", "seed_1"}
    planned = alem_eval.train("tiny/pqn-vdn-rnn/easy/seed0", source=str(FIXTURES), dry_run=True)
    assert planned.to_frame()[["cell", "status"]].values.tolist() == [
        ["tiny/pqn-vdn-rnn/easy/seed0", "planned"]
    ]
    assert json.dumps(planned.to_json())


def test_quiet_silences_the_progress_of_a_command_but_not_its_result():
    from typer.testing import CliRunner

    from alem_eval.cli.app import _register, app

    _register()
    argv = ["train", "tiny/pqn-vdn-rnn/easy/seed0", "--source", str(FIXTURES), "--dry-run"]
    loud = CliRunner().invoke(app, argv)
    quiet = CliRunner().invoke(app, [*argv, "--quiet"])
    assert loud.exit_code == quiet.exit_code == 0, (loud.output, quiet.output)
    assert "512 steps = 2 updates" in loud.output  # the plan: progress for a person
    assert quiet.output == ""


def test_scenario_progress_reaches_jupyter_through_the_episode_bar(monkeypatch):
    """In Jupyter (a live display that is no terminal) the scenario hands the library the
    episode bar's callbacks, as score and crossplay do."""
    from alem_eval.core import progress
    from alem_eval.scoring import scenario as library

    given = {}

    def run_scenario(source, cells, focal, *, on_progress=None, on_episodes=None, **_):
        given.update(on_progress=on_progress, on_episodes=on_episodes)
        return synthetic_scenario()

    monkeypatch.setattr(library, "run_scenario", run_scenario)
    monkeypatch.setattr(progress.err_console, "_force_terminal", False)
    assert not progress.err_console.is_terminal  # as in Jupyter, whose display is live:
    monkeypatch.setattr(progress, "live_display", lambda: True)
    alem_eval.scenario("demo/ippo", "random-legal", source="demo")
    assert callable(given["on_progress"]) and callable(given["on_episodes"])
    alem_eval.scenario("demo/ippo", "random-legal", source="demo", progress=False)
    assert given == {"on_progress": None, "on_episodes": None}


def test_teams_played_are_said_in_one_line_not_one_per_team(monkeypatch, tmp_path):
    """Cross-play of 8 teams (the evaluator stubbed): the teams to play and the teams
    played, two lines, however many teams (a 64-team scenario printed ~260)."""
    from alem_eval.evaluate import rollout
    from alem_eval.evaluate.rollout import StackResult
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.scoring.crossplay import GAP_METRICS

    def run_teams(cfgs, weights, teams, *, num_episodes, on_team=None, **_):
        records = [[{**dict.fromkeys(GAP_METRICS, 0.5), "episode_length": 4.0}] * num_episodes]
        for i in range(len(teams)):
            on_team(i, records[0])
        return StackResult(records * len(teams), [], "fast", "hard", CHUNK)

    monkeypatch.setattr(rollout, "run_teams", run_teams)
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.hub.sources import open_source
    from alem_eval.scoring.crossplay import run_crossplay

    lines: list[str] = []
    src = open_source(str(FIXTURES))
    result = run_crossplay(
        src,
        src.select(["tiny/ippo-rnn"]),
        eval_difficulty="hard",
        num_episodes=2,
        max_steps=32,
        reps=10,
        store=ResultsStore(tmp_path / "results"),
        on_progress=lines.append,
    )
    assert len(result.teams) == 8
    assert len(lines) == 2, lines
    assert re.match(r"8 teams on hard: 0 read back from the results store, 8 to score", lines[0])
    assert re.match(r"scored 8 teams in \d+s; stored in ", lines[1])


def _doc_tables() -> tuple[list[list[str]], list[list[str]]]:
    """docs/python-api.md's table of functions and table of classes, rows of cells."""
    text = (REPO / "docs" / "python-api.md").read_text()
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([c.strip().strip("`") for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif rows:
            tables.append(rows[2:])  # header and rule
            rows = []
    functions, classes = (t for t in tables if t and t[0][0] in ("[`select`](#select)", "Cell"))
    return functions, classes


def test_the_api_table_lists_every_function_its_first_argument_return_and_command():
    from alem_eval.cli.app import _register, app

    functions, classes = _doc_tables()
    named = {re.match(r"\[`(\w+)`\]", row[0]).group(1): row[1:] for row in functions}
    assert set(named) == set(_functions()), "docs/python-api.md's table vs alem_eval.__all__"
    _register()
    commands = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    for name, (first, returns, command) in named.items():
        params = list(inspect.signature(_functions()[name]).parameters.values())
        star = "*" if params[0].kind is inspect.Parameter.VAR_POSITIONAL else ""
        assert first == star + params[0].name, name
        annotation = str(inspect.signature(_functions()[name]).return_annotation)
        assert returns.replace("\\|", "|") == annotation.removeprefix("pd."), name
        assert command == "-" or command.removeprefix("alem-eval ") in commands, name
    exported = {n for n in alem_eval.__all__ if inspect.isclass(getattr(alem_eval, n))}
    assert {row[0] for row in classes} == exported


def test_render_and_compare_hand_the_library_what_their_commands_do(monkeypatch, tmp_path):
    """(The library stubbed: nothing compiles.) A team is one cell or one per slot, Cells
    or selectors; compare takes the cells first and the two sources after."""
    import numpy as np

    from alem_eval.rendering import episode
    from alem_eval.scoring import compare as library

    drawn = []

    def render_episode(source, team, **kwargs):
        drawn.append((source.select([team.split("+")[0]])[0].id, team, kwargs["episode"]))
        actions = np.zeros((3, 3), np.int32)
        return episode.RenderResult(
            tmp_path / "x.gif", (team,), "easy", 0, 4, 3, False, 1.0, (), actions
        )

    monkeypatch.setattr(episode, "render_episode", render_episode)
    demo = alem_eval.select(["demo/ippo", "demo/pqn"], source="demo")
    clip = alem_eval.render([demo[0], demo[1], demo[0]], episode=2, progress=False)
    alem_eval.render("demo/ippo+demo/pqn+demo/ippo", source="demo", progress=False)
    assert drawn[0] == (demo[0].id, "+".join(c.id for c in (demo[0], demo[1], demo[0])), 2)
    assert drawn[1][1] == "demo/ippo+demo/pqn+demo/ippo"
    assert clip.to_frame().columns.tolist() == ["step", "slot0", "slot1", "slot2"]
    assert len(clip.to_frame()) == clip.steps == 3 and clip.to_json()["frames"] == 4
    with pytest.raises(UsageError, match="the Cells were selected from demo"):
        alem_eval.render(demo[0], source="hub")

    asked = {}

    def compare_sources(sources, selectors, **kwargs):
        asked.update(sources=sources, selectors=selectors, **kwargs)
        row = dict(eval_difficulty="easy", A=sources[0], B=sources[1], runs="episodes")
        row.update(n_A=1, n_B=1, p_improvement=0.5, p_lo=0.4, p_hi=0.6, verdict="no difference")
        return [{**row, "resampled": "worlds, jointly"}]

    monkeypatch.setattr(library, "compare_sources", compare_sources)
    cmp = alem_eval.compare(demo, ("demo", "runs"), store=tmp_path / "c", progress=False)
    assert asked["sources"] == ["demo", "runs"] and asked["selectors"] == [c.id for c in demo]
    assert asked["episodes"] == 20 and asked["store"].root == tmp_path / "c"
    assert cmp.to_frame()["p_improvement"].tolist() == [0.5]
    assert cmp.to_json()["rows"][0]["verdict"] == "no difference"
    assert cmp.lines()[0].startswith("easy: P(A > B) = 0.50 [0.40, 0.60] on ")


def test_every_command_that_shows_progress_takes_quiet():
    import typer.main

    from alem_eval.cli.app import _register, app

    _register()
    group = typer.main.get_command(app)
    shows = ("score", "compare", "crossplay", "scenario", "render", "train", "demo", "pull")
    commands = {n: group.commands[n] for n in shows}  # type: ignore[attr-defined]
    commands["dataset export"] = group.commands["dataset"].commands["export"]  # type: ignore[attr-defined]
    for name, command in commands.items():
        assert "--quiet" in {o for p in command.params for o in p.opts}, name
