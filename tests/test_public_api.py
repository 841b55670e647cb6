"""PUBLIC API: ``import alem_eval`` is the whole library a notebook needs.

The first test is a notebook-style script: it imports nothing of alem-eval but the
package, scores the four demo cells into a DataFrame, prints the leaderboard as LaTeX and
plays a demo policy in its own environment loop. Its episodes and step cap are those of
``alem-eval demo`` (tests/test_demo.py), whose compiled program it reuses (same group).
The others are cheap: what importing costs, the public names, errors, typing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import alem_eval
from alem_eval.core.errors import AlemEvalError

from .conftest import FIXTURES, REPO
from .eval_support import DEMO_PROGRAMS

EPISODES, MAX_STEPS = 8, 300  # alem-eval demo's: its compiled program, again
PLAY_STEPS = 50
HEADLINE = (
    "Team/reward_pct_of_max",
    "Team/normal_reward_pct_of_max",
    "Team/coord_reward_pct_of_max",
    "Team/achievement_pct",
)


@pytest.mark.slow
@pytest.mark.xdist_group(DEMO_PROGRAMS)
def test_a_notebook_scores_the_demo_cells_prints_latex_and_plays_a_policy(tmp_path, capsys):
    import jax
    import numpy as np

    results = tmp_path / "results"
    cells = alem_eval.select(source="demo")
    episodes = alem_eval.score(cells, episodes=EPISODES, max_steps=MAX_STEPS, store=results)
    assert capsys.readouterr().out == ""  # progress goes to stderr, never stdout

    first = "cell budget algorithm difficulty seed eval_difficulty episode episode_length"
    assert list(episodes.columns[:8]) == first.split()
    assert set(HEADLINE) <= set(episodes.columns)
    assert len(episodes) == len(cells) * EPISODES
    for c in cells:
        mine = episodes[episodes["cell"] == c.id]
        assert list(mine["episode"]) == list(range(EPISODES))
        assert (mine["eval_difficulty"] == c.difficulty).all() and (mine["seed"] == c.seed).all()
    assert episodes["episode_length"].between(1, MAX_STEPS).all()
    stored = alem_eval.results(cells, store=results)  # what score kept, read back
    assert len(stored) == len(episodes) and set(HEADLINE) <= set(stored.columns)
    assert sorted(stored["cell"].unique()) == sorted(c.id for c in cells)

    board = alem_eval.leaderboard(cells, store=results, reps=1_000)
    latex = board.to_latex()
    print(latex)
    assert "\\begin{tabular}" in latex and "\\bottomrule" in latex
    frame = board.to_frame()
    assert sorted(frame["algorithm"]) == sorted(c.algorithm for c in cells)  # budget x algo
    for _, row in frame.iterrows():
        mine = episodes[episodes["algorithm"] == row["algorithm"]]
        # One seed: its mean over the episodes is the mean over seeds (a fraction, as the
        # episodes' own column: one unit in every DataFrame).
        assert row["easy_total"] == pytest.approx(mine["Team/reward_pct_of_max"].mean())
        assert frame.attrs["units"] == "fraction"
        assert row["easy_seeds"] == 1

    policy = alem_eval.load_policy(cells[0])
    env = alem_eval.make_env(cells[0].difficulty)
    assert (policy.obs_dim, policy.num_actions) == (env.obs_dim, env.num_actions)
    obs, state = env.reset(jax.random.PRNGKey(9999))
    carry, key = policy.init(1), jax.random.PRNGKey(1)
    masked_some = False
    for t in range(PLAY_STEPS):
        assert obs.shape == (env.num_agents, env.obs_dim) and obs.dtype == np.float32, t
        mask = env.action_mask(state)
        assert mask.shape == (env.num_agents, env.num_actions) and mask.dtype == np.bool_
        carry, actions = policy.act(carry, obs[None], mask[None])
        a = np.asarray(actions[0])
        assert a.shape == (env.num_agents,) and a.dtype == np.int32
        assert np.asarray(mask)[np.arange(env.num_agents), a].all(), f"illegal action at {t}"
        masked_some |= not np.asarray(mask).all()
        key, step_key = jax.random.split(key)
        obs, state, rewards, done, info = env.step(step_key, state, actions[0])
        assert rewards.shape == (env.num_agents,) and info["agent_dones"].shape == (3,)
        if done:
            obs, state = env.reset(jax.random.PRNGKey(10_000 + t))
            carry = policy.init(1)
    assert masked_some  # the mask did rule actions out


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )


def test_importing_alem_eval_imports_no_jax_and_selecting_cells_neither():
    proc = _python(
        "import sys, alem_eval\n"
        "assert 'jax' not in sys.modules, 'import'\n"
        "cells = alem_eval.select('demo', source='demo')\n"
        "assert len(cells) == 4 and cells[0].id.startswith('demo/')\n"
        "assert 'jax' not in sys.modules and 'pandas' not in sys.modules, 'select'\n"
        "print(set(alem_eval.__all__) <= set(dir(alem_eval)))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"  # and nothing else on stdout


def test_public_names_are_documented_and_stay_functions_once_the_whole_library_loaded():
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(alem_eval.__path__, "alem_eval."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    from alem_eval.api import stored

    assert set(alem_eval.__all__) == set(alem_eval._EXPORTS)
    for name in alem_eval.__all__:
        value = getattr(alem_eval, name)
        assert not isinstance(value, type(alem_eval)), f"alem_eval.{name} is a module"
        assert value.__doc__, f"alem_eval.{name} has no docstring"
        module = importlib.import_module(f"alem_eval.{alem_eval._EXPORTS[name]}")
        assert value is getattr(module, name), name
    from alem_eval import render, report  # the functions, as `from alem_eval import *` gives

    assert report is stored.report and render.__module__ == "alem_eval.api.render"
    for cls in (alem_eval.Policy, alem_eval.Env, alem_eval.CrossPlay, alem_eval.Leaderboard):
        methods = [m for m in vars(cls) if not m.startswith("_") and callable(vars(cls)[m])]
        assert all(getattr(cls, m).__doc__ or m.startswith("to_") for m in methods), cls


def test_no_package_or_module_of_alem_eval_is_named_like_a_public_name():
    """Loading ``alem_eval.<x>`` sets the attribute ``x`` of the package: a layer named like
    a public function (``report``, ``verify``, ...) would replace that function."""
    import pkgutil

    children = {info.name for info in pkgutil.iter_modules(alem_eval.__path__)}
    assert children & set(alem_eval.__all__) == set()


def test_the_package_says_it_is_typed():
    import tomllib

    assert (REPO / "alem_eval" / "py.typed").is_file()
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"]["alem_eval"]


def test_cells_carry_their_source_and_selectors_need_one():
    from alem_eval.core.errors import SelectorError, UsageError

    demo = alem_eval.select(source="demo")
    tiny = alem_eval.select("tiny/ippo-rnn", source=str(FIXTURES))
    assert [c.id for c in tiny] == ["tiny/ippo-rnn/easy/seed0", "tiny/ippo-rnn/hard/seed2"]
    assert alem_eval.select(source="demo") == demo  # equal cells, whatever the call
    with pytest.raises(UsageError, match="no cells given"):
        alem_eval.score([])
    with pytest.raises(UsageError, match="2 sources"):
        alem_eval.verify([*demo, *tiny])
    with pytest.raises(UsageError, match=r"all Cells from alem_eval\.select"):
        alem_eval.pull([demo[0], "demo/ippo"])
    with pytest.raises(SelectorError, match="matches no cell"):
        alem_eval.verify("tiny/nothing", source=str(FIXTURES))
    with pytest.raises(UsageError, match="load_policy takes one cell"):
        alem_eval.load_policy("tiny/ippo-rnn", source=str(FIXTURES))
    with pytest.raises(UsageError, match="unknown eval difficulty 'extreme'"):
        alem_eval.make_env("extreme")


def test_verify_and_pull_take_selectors_with_a_source():
    frame = alem_eval.verify("tiny/ippo-rnn/easy", source=str(FIXTURES))
    assert list(frame.columns) == [
        "cell",
        "status",
        "checked",
        "num_params",
        "repaired",
        "message",
        "warnings",
    ]
    assert list(frame["checked"]) == [None] and list(frame["repaired"]) == [[]]  # local source
    assert list(frame["cell"]) == ["tiny/ippo-rnn/easy/seed0"]
    assert list(frame["status"]) == ["OK"]
    report = alem_eval.pull(alem_eval.select("tiny/pqn", source=str(FIXTURES)))
    assert [c.id for c in report.cells] == ["tiny/pqn-vdn-rnn/easy/seed0"]
    assert report.files_fetched == 0  # a local source holds its files already


def test_a_policy_checks_the_shapes_it_is_given():
    import numpy as np

    from alem_eval.core.errors import UsageError

    policy = alem_eval.load_policy("demo/ippo", source="demo")
    obs = np.zeros((2, policy.num_agents, policy.obs_dim), np.float32)
    with pytest.raises(UsageError, match=r"mask must be \[batch, 3, 60\], got \[2, 3, 59\]"):
        policy.act(policy.init(2), obs, np.ones((2, 3, policy.num_actions - 1), bool))
    with pytest.raises(UsageError, match=r"obs must be \[batch, 3, 9730\]"):
        policy.act(policy.init(2), obs[0], np.ones((3, policy.num_actions), bool))


def test_crossplay_returns_teams_gaps_and_the_matrix_as_frames(tmp_path, monkeypatch):
    """The library's cross-play with the evaluator stubbed (no compile): one row per team,
    one gap row per metric, the pair matrix over the cells."""
    from alem_eval.evaluate import rollout
    from alem_eval.evaluate.rollout import StackResult
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.scoring.crossplay import GAP_METRICS

    def run_teams(cfgs, weights, teams, *, num_episodes, on_team=None, **_):
        records = [
            [{**dict.fromkeys(GAP_METRICS, 0.1 * i), "episode_length": 4.0}] * num_episodes
            for i in range(len(teams))
        ]
        for i, recs in enumerate(records):
            on_team(i, recs)
        return StackResult(records, [], "fast", "hard", CHUNK)

    monkeypatch.setattr(rollout, "run_teams", run_teams)
    result = alem_eval.crossplay(
        "tiny/ippo-rnn",
        source=str(FIXTURES),
        eval_difficulty="hard",
        episodes=2,
        max_steps=32,
        reps=10,
        store=tmp_path / "results",
        out=tmp_path / "out",
    )
    teams = result.to_frame()
    assert len(teams) == len(result.result.teams) == 8  # 2 self-play + 2 x 3 pairs
    assert {"slot0", "slot1", "slot2", "shape", "Team/reward_pct_of_max"} <= set(teams.columns)
    assert list(result.gap["metric"]) == list(GAP_METRICS)
    assert {"self", "cross", "gap", "lo", "hi"} <= set(result.gap.columns)
    assert list(result.matrix.index) == list(result.matrix.columns) == list(result.result.cells)
    assert result.to_json()["teams_total"] == 8
    assert {p.name for p in result.outputs} >= {"teams.csv", "crossplay.json"}
    stored = alem_eval.results(teams=True, store=tmp_path / "results")
    assert len(stored) == 8 * 2 and stored["team"].nunique() == 8  # a row per team episode
    assert set(stored["team"]) == {",".join(t.team.slots) for t in result.result.teams}
    with pytest.raises(AlemEvalError, match="no scored results"):
        alem_eval.results(store=tmp_path / "results")  # teams never pass for cell scores
