"""Your agent with the baselines: focal agents in the play core (JAX and host), their
faults, the scenario compositions and `alem-eval scenario` end to end."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.scoring.scenario import population_of, scenario_teams

from .clitools import (
    assert_one_line_error,
    cli_env,
    closed_port_url,
    run_cli,
    run_cli_in_process,
)
from .eval_support import FAST_EPISODES

REPO = Path(__file__).resolve().parents[1]
BACKGROUND = "demo/ippo-rnn/easy/seed0"


# ----------------------------------------------------------------------------------------
# Compositions (no JAX)
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["visitor", "resident"])
def test_visitor_and_resident_put_the_focal_in_every_slot_position(mode):
    cells = ["b/ippo/hard/seed0", "b/ippo/hard/seed1", "b/pqn/hard/seed0"]
    teams = scenario_teams(cells, [mode], "focal:x")
    focal = [t for t in teams if t.kind == "focal"]
    for c in cells:
        mine = [t.team.slots for t in focal if t.background == c]
        want = 1 if mode == "visitor" else 2
        assert all(s.count("focal:x") == want and s.count(c) == 3 - want for s in mine)
        lone = "focal:x" if mode == "visitor" else c
        assert sorted(s.index(lone) for s in mine) == [0, 1, 2]  # every position once
    assert Counter(t.kind for t in teams if t.mode is None) == {"self": 3}
    # Strangers: the population's other seeds; a population of one: the other cells.
    cross = [t for t in teams if t.kind == "cross"]
    assert {(t.background, t.stranger) for t in cross} == {
        ("b/ippo/hard/seed0", "b/ippo/hard/seed1"),
        ("b/ippo/hard/seed1", "b/ippo/hard/seed0"),
        ("b/pqn/hard/seed0", "b/ippo/hard/seed0"),
        ("b/pqn/hard/seed0", "b/ippo/hard/seed1"),
    }
    assert population_of("b/ippo/hard/seed1") == "b/ippo/hard"


# ----------------------------------------------------------------------------------------
# Bad focal specs: one line naming the spec, before anything runs
# ----------------------------------------------------------------------------------------
BAD_AGENTS = """
import jax.numpy as jnp

class Agent:
    def __init__(self, name, act):
        self.name, self._act = name, act
    def init(self, batch):
        return None
    def act(self, carry, obs, mask, key):
        return self._act(obs, mask)

def wrong_shape():
    return Agent("wrong-shape", lambda o, m: (None, jnp.zeros((o.shape[0], 2), jnp.int32)))

def wrong_dtype():
    return Agent("wrong-dtype", lambda o, m: (None, jnp.zeros(o.shape[:1], jnp.float32)))

def raises_in_act():
    def act(o, m):
        raise RuntimeError("boom")
    return Agent("raises", act)

def illegal():
    return Agent("illegal", lambda o, m: (None, jnp.full(o.shape[:1], 10_000, jnp.int32)))

def raising_factory():
    raise ValueError("no agent today")
"""


@pytest.fixture(scope="module")
def bad_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("agents") / "bad_agents.py"
    path.write_text(BAD_AGENTS)
    return path


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_package_xyz.agents:make", "no module named 'no_such_package_xyz'"),
        ("alem_eval.evaluate.reference_agents:nope", "has no attribute 'nope'"),
        ("missing/agents.py:make", "no such file"),
        ("just-a-name", "expected package.module:factory"),
        ("{bad}:raising_factory", "the factory raised ValueError: no agent today"),
    ],
)
def test_a_bad_focal_spec_is_a_one_line_usage_error_naming_it(spec, message, bad_file):
    from alem_eval.evaluate.agent_spec import load_focal

    spec = spec.format(bad=bad_file)
    with pytest.raises(UsageError) as err:
        load_focal(spec)
    assert str(err.value).startswith(f"focal {spec}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("wrong_shape", "act must return actions int32 [2] for 2 slots, got int32 [2, 2]"),
        ("wrong_dtype", "act must return actions int32 [2] for 2 slots, got float32 [2]"),
        ("raises_in_act", "act raised RuntimeError: boom"),
    ],
)
def test_a_jax_agent_with_wrong_outputs_or_a_raising_act_fails_before_compiling(
    factory, message, bad_file
):
    from alem_eval.evaluate.agent_spec import load_focal

    spec = f"{bad_file}:{factory}"
    with pytest.raises(EvaluationError) as err:
        load_focal(spec).checked(obs_dim=8, num_actions=5)
    assert str(err.value) == f"focal {spec}: {message}"


def test_the_command_is_one_call_to_alem_eval_scenario_and_prints_what_it_returns(
    tmp_path, monkeypatch
):
    """``alem-eval scenario`` hands its options to ``alem_eval.scenario`` (the focal's
    arguments parsed) and prints the result it returns (stubbed with a canned one:
    nothing plays); --dry-run is the same call with ``dry_run=True``."""
    from alem_eval.api import scenario as api
    from alem_eval.cli.console import OutputFormat, emit_records
    from alem_eval.scoring.plan import RunPlan

    from .conftest import FIXTURES
    from .synthetic import synthetic_scenario

    out = tmp_path / "scen"
    canned = api.Scenario(synthetic_scenario(), (out / "scenario.json",))
    plan = RunPlan("scenario", "somewhere", (), episodes=6, teams=3)
    calls = []

    def scenario(cells, focal, **kwargs):
        calls.append((cells, focal, kwargs))
        return plan if kwargs.get("dry_run") else canned

    monkeypatch.setattr(api, "scenario", scenario)
    env = cli_env(tmp_path, closed_port_url())
    args = ["scenario", "tiny/ippo-rnn", "--source", str(FIXTURES), "--focal", "noop"]
    args += ["--focal-arg", "temperature=0.5", "--mode", "visitor", "--difficulty", "easy"]
    args += ["--splits", str(tmp_path / "splits.json"), "--eval-difficulty", "hard"]
    args += ["--episodes", "3", "--max-steps", "50", "--seed", "7", "--reps", "100"]
    args += ["--results", str(tmp_path / "store"), "--fresh", "--out", str(out)]
    args += ["--batch", "4", "--devices", "auto", "--record", str(tmp_path / "rec")]
    proc = run_cli_in_process([*args, "--format", "csv"], env)
    assert proc.returncode == 0, proc.stderr
    assert calls == [
        (
            ["tiny/ippo-rnn"],
            "noop",
            {
                "focal_args": {"temperature": 0.5},
                "mode": "visitor",
                "eval_difficulty": "hard",
                "episodes": 3,
                "max_steps": 50,
                "seed": 7,
                "reps": 100,
                "store": tmp_path / "store",
                "fresh": True,
                "out": out,
                "source": str(FIXTURES),
                "repo": None,
                "revision": None,
                "cache_dir": None,
                "difficulty": ["easy"],
                "split": None,
                "splits": tmp_path / "splits.json",
                "on_env_mismatch": "error",
                "batch": 4,
                "devices": "auto",
                "record": tmp_path / "rec",
                "progress": True,
            },
        )
    ]
    rows = [r.flat() for r in canned.result.rows]
    with contextlib.redirect_stdout(io.StringIO()) as expected:
        emit_records(rows, OutputFormat.csv, columns=list(rows[0]))
    assert proc.stdout == expected.getvalue()
    dry = run_cli_in_process([*args, "--dry-run", "--format", "json"], env)
    assert dry.returncode == 0, dry.stderr
    assert calls[-1][2]["dry_run"] is True and len(calls) == 2
    assert json.loads(dry.stdout) == plan.as_json()


def test_focal_args_are_json_values_and_the_identity_follows_them():
    from alem_eval.evaluate.agent_spec import load_focal, parse_focal_args

    assert parse_focal_args(["do_every=3", "tag=x"]) == {"do_every": 3, "tag": "x"}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_focal_args(["3"])
    a = load_focal("examples/agents.py:explorer", {"do_every": 3})
    b = load_focal("examples/agents.py:explorer", {"do_every": 3})
    c = load_focal("examples/agents.py:explorer", {"do_every": 4})
    assert a.agent.do_every == 3 and a.identity == b.identity != c.identity
    assert a.identity.startswith("explorer@")


# ----------------------------------------------------------------------------------------
# In the play core: one program for every test below (one background cell, four teams)
# ----------------------------------------------------------------------------------------
class Wrapped:
    """A JAX focal that plays a released cell's own ``load_policy``."""

    name = "wrapped"

    def __init__(self, policy):
        self.policy = policy

    def init(self, batch):
        return self.policy.init(1)  # one episode's carry (the policy acts on all P slots)

    def act(self, carry, obs, mask, key):
        carry, actions = self.policy.act(carry, obs[None], mask[None])
        return carry, actions[0]


@functools.cache
def _background():
    import alem_eval
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell

    lc = load_cell(
        os.path.join(demo_root(), BACKGROUND),
        algorithm="ippo-rnn",
        difficulty="easy",
        seed=0,
        policy_only=True,
        where=BACKGROUND,
    )
    return lc, alem_eval.load_policy(BACKGROUND, source="demo")


def play_teams(agent, wrapped=None, background=None):
    """The one program's run (also from a new process): teams the background's
    self-play, a wrapped policy's self-play (``wrapped``, default the background's own
    ``load_policy``), the JAX script as a visitor in slot 0, and ``agent`` there ->
    (result, teams seen by on_team)."""
    from alem_eval.evaluate.agent_runs import run_agent_teams
    from alem_eval.evaluate.reference_agents import Scripted

    lc, policy = _background()
    seen: list[int] = []
    result = run_agent_teams(
        [lc.cfg] * 4,
        [lc.weights if background is None else background, None, None, None],
        [(0, 0, 0), (1, 1, 1), (2, 0, 0), (3, 0, 0)],
        {1: wrapped or Wrapped(policy), 2: Scripted(), 3: agent},
        protocol="fast",
        eval_difficulty="easy",
        num_episodes=FAST_EPISODES,
        max_steps=40,
        batch=16,
        on_team=lambda i, _records: seen.append(i),
    )
    return result, seen


@pytest.fixture(scope="module")
def play():
    """``run(agent, wrapped=None, background=None)``: :func:`play_teams`."""
    return play_teams


@pytest.fixture(scope="module")
def played(play):
    from alem_eval.evaluate.reference_agents import ScriptedHost

    return play(ScriptedHost())


@pytest.mark.xdist_group("scenario-play")
def test_a_jax_focal_wrapping_a_baselines_load_policy_reproduces_its_self_play(played):
    result, _ = played
    background, wrapped = result.records[0], result.records[1]
    assert len(wrapped) == FAST_EPISODES and wrapped == background


@pytest.mark.xdist_group("scenario-play")
def test_a_host_agent_choosing_the_jax_agents_actions_gives_identical_records(played):
    result, seen = played
    jax_team, host_team = result.records[2], result.records[3]
    assert len(host_team) == FAST_EPISODES and host_team == jax_team
    assert sorted(seen) == [0, 1, 2, 3]
    # ... and the focal plays: its team is not the background's self-play.
    assert [r["episode_length"] for r in host_team] != [] and host_team != result.records[0]


class _Host:
    host = True

    def __init__(self, name, act):
        self.name, self._act = name, act

    def init(self, batch):
        return None

    def act(self, carry, obs, mask, key):
        return None, self._act(obs, mask)


def _boom(obs, mask):
    raise RuntimeError("the model server is down")


class _Later:
    """Answers legal actions ``calls`` times (its probe step and the first rollout
    steps), then raises: a fault inside the rollout's callback."""

    def __init__(self, calls):
        self.left = calls

    def __call__(self, obs, mask):
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("out of credit")
        return np.argmax(mask, axis=1).astype(np.int32)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (_Host("raises", _boom), "act raised RuntimeError: the model server is down"),
        (
            _Host("short", lambda o, m: np.zeros(len(o) - 1, np.int32)),
            # on its probe step (one row: a visitor's slot), before the rollout compiles
            "act must return 1 integer actions (one per row), got int32 [0]",
        ),
        (
            _Host("illegal", lambda o, m: np.full(len(o), 10_000)),
            "act chose action 10000, which is not legal",
        ),
        (_Host("later", _Later(3)), "act raised RuntimeError: out of credit"),
    ],
    ids=["raises", "wrong-length", "illegal", "in-the-rollout"],
)
@pytest.mark.xdist_group("scenario-play")
def test_a_faulty_host_agent_is_one_error_naming_it_and_no_team_reaches_the_caller(
    play, agent, message
):
    with pytest.raises(EvaluationError) as err:
        play(agent)
    assert str(err.value) == f"focal {agent.name}: {message}"


@pytest.mark.xdist_group("scenario-play")
def test_a_jax_agent_choosing_an_illegal_action_fails_before_the_rollout(play, bad_file):
    from alem_eval.evaluate.agent_spec import load_focal

    spec = f"{bad_file}:illegal"
    with pytest.raises(EvaluationError) as err:
        play(load_focal(spec))
    assert str(err.value) == f"focal {spec}: act chose action 10000, which is not legal"


def _rollout_work() -> tuple[int, int]:
    """(rollout traces, rollout compiles) of this process so far."""
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from alem_eval.evaluate.programs import COMPILE_STATS

    return TRACE_COUNTS["rollout"], sum(s.program.startswith("rollout") for s in COMPILE_STATS)


@pytest.mark.slow
@pytest.mark.xdist_group("scenario-play")
def test_another_instance_of_a_jax_agent_with_other_weights_reuses_its_program(play, played):
    """A JAX agent's arrays are inputs of its program: a new instance with other weights
    compiles nothing and plays its own weights (the wrapped policy of noisy weights plays
    the self-play of a background checkpoint with those weights)."""
    import jax

    from alem_eval.evaluate.reference_agents import ScriptedHost
    from alem_eval.evaluate.rollout import policy_variables
    from alem_eval.model.networks import build_network

    lc, policy = _background()
    rng = np.random.default_rng(0)
    noisy = jax.tree_util.tree_map(
        lambda x: (
            x + rng.normal(0, 0.05, np.shape(x)).astype(x.dtype)
            if np.issubdtype(np.asarray(x).dtype, np.floating)
            else x
        ),
        lc.weights,
    )
    variables = policy_variables(build_network(lc.cfg), noisy, "noisy")
    params = jax.jit(policy._static.greedy.prepare)(variables)
    other = Wrapped(dataclasses.replace(policy, params=params))
    before = _rollout_work()
    result, _ = play(ScriptedHost(), wrapped=other, background=noisy)
    assert _rollout_work() == before  # the program of `played`, not traced nor compiled
    background, wrapped = result.records[0], result.records[1]
    assert len(wrapped) == FAST_EPISODES and wrapped == background
    assert background != played[0].records[0]  # (other weights, other records)


class Countdown:
    """A JAX agent that plays the first legal action until each episode's step count
    reaches ``limit`` (an array: an input of its program), then action 10000."""

    name = "countdown"

    def __init__(self, limit: int) -> None:
        self.limit = np.asarray(limit, np.int32)

    def init(self, batch):
        import jax.numpy as jnp

        return jnp.zeros((batch,), jnp.int32)

    def act(self, carry, obs, mask, key):
        import jax.numpy as jnp

        first = jnp.argmax(mask, axis=-1).astype(jnp.int32)
        return carry + 1, jnp.where(carry >= self.limit, 10_000, first).astype(jnp.int32)


_FOCAL_RERUN = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache()  # the session's cache ($ALEM_EVAL_JAX_CACHE)
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from tests.test_scenario import Countdown, play_teams
    result, _ = play_teams(Countdown({limit}))
    print("RESULT" + json.dumps({{"records": result.records, "counts": dict(TRACE_COUNTS)}}))
""")


@pytest.mark.slow
@pytest.mark.xdist_group("scenario-play")
def test_a_new_process_reuses_a_jax_focals_exported_program_and_plays_identically(play):
    """A program with JAX agents only has no host callback: it is exported for the warm
    start (and kept in the persistent compilation cache), keyed by the agents' code."""
    here, _ = play(Countdown(1_000_000))  # traced or loaded here: it is exported
    proc = subprocess.run(
        [sys.executable, "-c", _FOCAL_RERUN.format(repo=str(REPO), limit=1_000_000)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    other = json.loads(line[len("RESULT") :])
    assert other["counts"].get("rollout", 0) == 0, other["counts"]  # no Python trace
    assert other["counts"].get("rollout:loaded", 0) == 1
    assert other["records"] == here.records


@pytest.mark.slow
@pytest.mark.xdist_group("scenario-play")
def test_a_jax_agents_illegal_action_in_the_rollout_is_one_line_naming_it(play):
    """Legal on its probe step, illegal from its sixth step: the rollout reports it (an
    output, no host callback) and the run raises after that call."""
    from alem_eval.evaluate.agents import make_group

    group = dataclasses.replace(make_group(Countdown(5)), label="my_agents.py:countdown")
    with pytest.raises(EvaluationError) as err:
        play(group)
    assert str(err.value) == (
        "focal my_agents.py:countdown: act chose action 10000, which is not legal"
    )
    from alem_eval.evaluate.programs import _PROGRAMS

    (prog,) = [p for k, p in _PROGRAMS.items() if group.key in k.network_keys]
    assert prog.advance.identity is not None  # no host callback in it: it is exported


@pytest.mark.slow
def test_a_host_agent_reads_alems_own_text_view_of_its_rows():
    import jax

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.host_agents import HostInfo
    from alem_eval.evaluate.programs import world_programs
    from alem_eval.evaluate.settings import eval_statics
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell

    cfg = load_cell(os.path.join(demo_root(), BACKGROUND), policy_only=True).cfg
    world = eval_statics(cfg).world
    reset, _ = world_programs(world)  # the rollout's own reset program
    _, state = reset(jax.random.PRNGKey(9999), get_eval_env(world).difficulty_params("easy"))
    rows = jax.tree_util.tree_map(lambda x: np.stack([np.asarray(x)] * 2), state)
    info = HostInfo(np.array([0, 2]), np.array([True, True]), rows, "easy", world)
    text = info.text(1)
    assert isinstance(text, str) and len(text) > 100
    capped = HostInfo(np.array([0, 2]), np.array([True, True]), rows, "easy", world, max_steps=100)
    assert "Step: 0/100 (100 remaining" in capped.text(1)  # the cap in force, not the env's
    with pytest.raises(UsageError, match="wants_state"):
        HostInfo(np.array([0]), np.array([True])).text(0)


@pytest.mark.slow
def test_a_host_agents_text_view_names_the_step_cap_the_run_plays_to():
    """The probe step a run gives a host agent (run_agent_teams passes its cap) shows the
    cap in force in alem's text view, not the env's own 100,000."""
    from alem_eval.evaluate.agent_runs import probe_group
    from alem_eval.evaluate.agents import make_group
    from alem_eval.evaluate.settings import eval_statics
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell

    seen: list[str] = []

    class Reader:
        name, host, wants_info, wants_state = "reader", True, True, True

        def init(self, batch):
            return None

        def act(self, carry, obs, mask, key, info=None):
            seen.append(info.text(0))
            return carry, np.zeros(len(obs), np.int32)

    cfg = load_cell(os.path.join(demo_root(), BACKGROUND), policy_only=True).cfg
    probe_group(make_group(Reader()), eval_statics(cfg).world, "easy", 1, max_steps=40)
    assert len(seen) == 1 and "Step: 0/40 (40 remaining" in seen[0]


# ----------------------------------------------------------------------------------------
# `alem-eval scenario` end to end
# ----------------------------------------------------------------------------------------
ARGS = [
    "scenario",
    "--focal",
    str(REPO / "examples" / "agents.py") + ":numpy_explorer",
    BACKGROUND,
    "--source",
    "demo",
    "--mode",
    "both",
    "--episodes",
    str(FAST_EPISODES),
    "--max-steps",
    "40",
]


@pytest.fixture(scope="module")
def scenario_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenario")
    env = cli_env(root, closed_port_url())
    results = root / "results"
    proc = run_cli(
        [*ARGS, "--results", str(results), "--out", str(root / "out"), "--format", "json"],
        env,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr
    return root, env, results, proc


@pytest.mark.xdist_group("scenario-cli")
def test_cli_scenario_reports_visitor_and_resident_beside_the_self_play(scenario_run):
    root, _, _, proc = scenario_run
    doc = json.loads(proc.stdout)
    assert doc["modes"] == ["visitor", "resident"] and doc["identity"].startswith("numpy-explorer@")
    # 1 self-play + 3 visitor + 3 resident positions; a population of one, alone: no stranger
    assert doc["teams_total"] == doc["teams_scored"] == 7
    rows = {(r["mode"], r["label"]): r for r in doc["rows"]}
    assert set(rows) == {(m, x) for m in doc["modes"] for x in ("Total", "Base", "Coord")}
    for r in doc["rows"]:
        f, s, d = r["focal"], r["self_play"], r["focal_minus_self"]
        assert r["n_teams"] == 3 and r["n_worlds"] == FAST_EPISODES
        assert f["lo"] <= f["point"] <= f["hi"] and s["lo"] <= s["point"] <= s["hi"]
        assert d["point"] == pytest.approx(f["point"] - s["point"])
        assert r["cross_play"] is None
    teams = {t["kind"] for t in doc["teams"]}
    assert teams == {"focal", "self"}
    assert (root / "out" / "scenario.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The JSON names the digests of the teams' records (the focal's identity in its
    # config document) and verifies against the store it names.
    from alem_eval.analysis.verify_results import verify_results

    assert doc["digests"]["config_document"]["settings"]["agents"] == {
        f"focal:{doc['identity']}": doc["identity"]
    }
    assert len(doc["digests"]["files"]) == 7
    assert verify_results(root / "out" / "scenario.json").ok


@pytest.mark.xdist_group("scenario-cli")
def test_cli_scenario_rerun_reads_every_team_back_fresh_plays_again_a_bad_spec_stores_nothing(
    scenario_run, tmp_path
):
    root, env, results, first = scenario_run
    out = ["--out", str(tmp_path / "out")]  # (the default --out is the working directory's)
    again = run_cli([*ARGS, *out, "--results", str(results), "--format", "json"], env, timeout=600)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["teams_scored"] == 0 and doc["teams_reused"] == 7
    assert (
        f"focal {ARGS[2]}: 6 of its teams read back from the results store, played before "
        f"under its identity {doc['identity']}" in " ".join(again.stderr.split())
    )
    assert doc["rows"] == json.loads(first.stdout)["rows"]
    # --fresh plays every team again, whatever the store holds (here as a table)
    table = run_cli([*ARGS, *out, "--results", str(results), "--fresh"], env, timeout=900)
    assert "focal - self" in table.stdout and "resident" in table.stdout
    assert "7 teams (7 scored, 0 read back)" in " ".join(table.stderr.split())
    bad = [*ARGS, *out, "--results", str(tmp_path / "r")]
    bad[2] = "examples/agents.py:nope"
    proc = run_cli(bad, env, timeout=600)
    assert_one_line_error(proc, "focal examples/agents.py:nope", "has no attribute 'nope'")
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").rglob("*.parquet"))


def test_the_reference_agents_follow_the_protocol():
    import jax
    import jax.numpy as jnp

    from alem_eval.evaluate.agents import make_group
    from alem_eval.evaluate.reference_agents import REFERENCE_AGENTS, script

    for name, factory in REFERENCE_AGENTS.items():
        group = make_group(factory()).checked(obs_dim=8, num_actions=6)
        assert group.name == name
    mask = np.array([[False, True, True, True, True, True], [True] * 5 + [False]])
    t = np.array([0, 1], np.int32)
    host = script(np, t, mask)[1]
    assert np.array_equal(host, np.asarray(script(jnp, jnp.asarray(t), jnp.asarray(mask))[1]))
    assert host.tolist() == [5, 1]  # DO on even steps; else walk (DO illegal -> lowest legal)
    noop = make_group(REFERENCE_AGENTS["noop"]()).agent
    assert noop.act(None, jnp.zeros((2, 8)), jnp.asarray(mask), jax.random.PRNGKey(0))[
        1
    ].tolist() == [1, 0]
