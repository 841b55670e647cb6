"""Focal agents' edges: their identity, the host path (bindings, callbacks, keys, devices)
and what a fault stops. The play-core runs with agents are in tests/test_scenario.py."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.evaluate import host_agents
from alem_eval.evaluate.agents import make_group

from .eval_support import FAST_EPISODES, run_on_host_devices

from .conftest import REPO

BACKGROUND = "demo/ippo-rnn/easy/seed0"


# ----------------------------------------------------------------------------------------
# Identity: what determines the behaviour
# ----------------------------------------------------------------------------------------
class Eps:
    """A JAX agent whose behaviour is set by an attribute, not by its class or a factory."""

    name = "eps"

    def __init__(self, eps: float, table=None, policy=None) -> None:
        self.eps = eps
        self.table = np.zeros(3, np.float32) if table is None else table
        self.policy = policy or (lambda x: x + 1)
        self.rng = np.random.default_rng(0)

    def init(self, batch):
        return None

    def act(self, carry, obs, mask, key):
        return carry, jnp.argmax(mask, axis=-1).astype(jnp.int32)


class Declared(Eps):
    version = "2024-06"


def test_an_agents_identity_follows_its_state_unless_it_declares_one():
    def ident(agent):
        return make_group(agent).identity

    assert ident(Eps(0.0)) != ident(Eps(0.9))  # another attribute: another agent
    assert ident(Eps(0.0)) == ident(Eps(0.0))  # equal state, another object: the same
    assert ident(Eps(0.0, table=np.ones(3, np.float32))) != ident(Eps(0.0))  # array bytes
    assert ident(Eps(0.0, table=np.zeros(3, np.float64))) != ident(Eps(0.0))  # ... dtype
    assert ident(Eps(0.0, table=jnp.zeros(3))) == ident(Eps(0.0))  # a JAX array alike
    assert ident(Eps(0.0, policy=lambda x: x + 2)) != ident(Eps(0.0))  # a function's code
    drawn = Eps(0.0)
    drawn.rng.random()
    assert ident(drawn) != ident(Eps(0.0))  # a random generator's state
    # A declared version stands for the state: the author says what the agent is.
    assert ident(Declared(0.0)) == ident(Declared(0.9)) != ident(Eps(0.0))
    assert ident(Eps(0.0)).startswith("eps@")


def test_a_jax_agents_program_follows_its_code_and_takes_its_arrays_as_inputs():
    """The program key: another instance with other array values shares it (they are
    inputs); other non-array state or array shapes do not, even under one declared
    version (which stands for the agent in the results store only)."""
    a = make_group(Eps(0.0))
    b = make_group(Eps(0.0, table=np.ones(3, np.float32)))
    assert a.key == b.key and a.identity != b.identity  # one program, two agents
    assert make_group(Eps(0.5)).key != a.key  # a float attribute is code, not an input
    assert make_group(Eps(0.0, table=np.ones(4, np.float32))).key != a.key  # other shape
    c, d = make_group(Declared(0.0)), make_group(Declared(0.0, policy=lambda x: x * 2))
    assert c.identity == d.identity and c.key != d.key  # a version stands for the results only
    assert [x.tolist() for x in b.arrays] == [[1.0, 1.0, 1.0]]
    rebuilt = b.bound(b.prepare((None, [np.full(3, 7.0, np.float32)])))
    assert rebuilt.table.tolist() == [7.0, 7.0, 7.0] and rebuilt.eps == 0.0
    assert b.agent.table.tolist() == [1.0, 1.0, 1.0]  # (a copy: the agent keeps its own)


class Counted:
    """Reads its array's value while ``act`` is traced (``int(self.n)``)."""

    name = "counted"

    def __init__(self, n: int) -> None:
        self.n = np.asarray(n, np.int32)

    def init(self, batch):
        return None

    def act(self, carry, obs, mask, key):
        return carry, jnp.full((obs.shape[0],), int(self.n), jnp.int32)


def test_an_agent_that_reads_its_arrays_while_traced_keeps_them_as_constants():
    a = make_group(Counted(0)).checked(8, 4)
    b = make_group(Counted(1)).checked(8, 4)
    assert a.arrays == () and b.arrays == ()  # constants of the program ...
    assert a.key != b.key  # ... so each value has its own


def test_a_python_api_focal_with_other_state_plays_again_and_fresh_replays(monkeypatch, tmp_path):
    """``alem_eval.scenario``'s path with the play core stubbed: an agent object's state
    keys its teams; a read-back is said in one line; ``fresh=True`` plays every team."""
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring import orchestration, play, scenario
    from alem_eval.scoring.play import CellKey, Worlds

    @dataclasses.dataclass(frozen=True)
    class Cell:
        id: str

    cell = Cell(BACKGROUND)
    three = dataclasses.make_dataclass("Statics", [("num_agents", int)])(3)
    worlds = Worlds({cell.id: (Path("x"), None, None)}, {cell.id: three}, "easy", 2, 10)
    played: list[int] = []

    def fake_play(members, todo, agents, *, finished, **kwargs):
        """orchestration._play: every match played and handed on as it ends (the
        results store's sink stores it)."""
        played.append(len(todo))
        records = [{"Team/reward_pct_of_max": 0.5, "episode_length": 10.0}] * 2
        for m in todo:
            finished(m, records)
        return 20

    monkeypatch.setattr(scenario, "resolve_worlds", lambda *a, **k: worlds)
    monkeypatch.setattr(play, "cell_key", lambda c, *a: CellKey(c.id, "c" * 16, "f" * 16, "1"))
    monkeypatch.setattr(orchestration, "_play", fake_play)
    store = open_store(tmp_path / "results")

    def run(agent, fresh=False):
        lines: list[str] = []
        result = scenario.run_scenario(
            None,
            [cell],
            agent,
            mode="visitor",
            store=store,
            fresh=fresh,
            reps=10,
            on_progress=lines.append,
        )
        return result, [ln for ln in lines if ln.startswith("focal ")]

    first, said = run(Eps(0.0))
    assert first.teams_scored == len(first.scores) == 4 and said == []  # 3 visitor + self
    again, said = run(Eps(0.0))
    assert again.teams_scored == 0 and len(said) == 1
    assert "3 of its teams read back" in said[0] and again.identity in said[0]
    other, said = run(Eps(0.9))
    assert other.identity != first.identity and other.teams_scored == 3 and said == []
    fresh, said = run(Eps(0.0), fresh=True)
    assert fresh.teams_scored == 4 and said == [] and played == [4, 3, 4]


# ----------------------------------------------------------------------------------------
# One interface: the classes apart, the play core asking only the interface
# ----------------------------------------------------------------------------------------
def test_a_jax_agent_and_a_host_agent_are_two_actor_classes_on_one_interface():
    from alem_eval.evaluate.actors import Actor, AgentActor
    from alem_eval.evaluate.agents import JaxAgent
    from alem_eval.evaluate.host_agents import HostAgent

    jax_agent, host_agent = make_group(Eps(0.0)), make_group(Host("h"))
    assert type(jax_agent) is JaxAgent and type(host_agent) is HostAgent
    for actor in (jax_agent, host_agent):
        assert isinstance(actor, Actor) and isinstance(actor, AgentActor)
        assert actor.masked and actor.algorithm == f"focal:{actor.name}"
    assert (jax_agent.host, host_agent.host) == (False, True)
    assert not hasattr(jax_agent, "wants_state") and not hasattr(host_agent, "arrays")
    assert make_group(jax_agent) is jax_agent  # an actor is used as it is


# ----------------------------------------------------------------------------------------
# The host path without the play core
# ----------------------------------------------------------------------------------------
class Host:
    """A host agent answering ``answer(obs, mask, key)``; ``keys`` keeps what it got."""

    host = True

    def __init__(self, name, answer=None):
        self.name = name
        self.answer = answer or (lambda o, m, k: np.argmax(m, axis=1))
        self.keys: list[np.ndarray] = []

    def init(self, batch):
        return None

    def act(self, carry, obs, mask, key):
        self.keys.append(np.asarray(key))
        return None, self.answer(obs, mask, key)


def _rows(r, num_actions=4):
    obs = np.zeros((r, 3), np.float32)
    mask = np.ones((r, num_actions), bool)
    return obs, mask, np.ones(r, bool), np.zeros((r, 2), np.uint32), np.arange(r), None


def test_a_host_callback_with_no_agent_bound_raises_never_noop():
    call = host_agents._HostCall(make_group(Host("h")).key)
    with pytest.raises(EvaluationError, match="no agent bound"):
        call(*_rows(3))


def test_run_teams_refuses_a_host_agent_it_cannot_bind(monkeypatch):
    from alem_eval.evaluate.rollout import run_teams

    group = make_group(Host("lonely"))
    with pytest.raises(EvaluationError) as err:
        run_teams([None, None], [None, None], [(0, 1, 1)], agents={1: group},
                  eval_difficulty="easy")  # fmt: skip
    assert str(err.value).startswith("focal lonely: a host agent plays through")
    assert "\n" not in str(err.value)


def test_several_host_agents_each_drive_their_own_callback_and_one_run_at_a_time():
    a = dataclasses.replace(make_group(Host("a", lambda o, m, k: np.full(len(o), 1))), host_slot=0)
    b = dataclasses.replace(make_group(Host("b", lambda o, m, k: np.full(len(o), 2))), host_slot=1)
    assert a.key != b.key
    with host_agents.bind_host_agents([a, b], "easy", None):
        assert host_agents._HostCall(a.key)(*_rows(2)).tolist() == [1, 1]
        assert host_agents._HostCall(b.key)(*_rows(3)).tolist() == [2, 2, 2]
        other = make_group(Host("c"))
        with pytest.raises(UsageError) as err, host_agents.bind_host_agents([other], "easy", None):
            pass  # (a second run in this process, at once)
        assert str(err.value) == (
            "focal c: another run with host agents (a, b) is playing in this process; "
            "host agents play one run at a time"
        )
    assert host_agents._HOST == {}


def test_a_residents_two_slots_get_distinct_host_keys():
    """``host_actions`` as the rollout calls it: 1 team x 2 episodes x 2 slots (a
    resident), one key per episode -> four rows, four keys."""
    agent = Host("keys")
    group = make_group(agent)
    episode_keys = jax.random.split(jax.random.PRNGKey(3), 2)[None]  # [1, E=2, 2]
    obs, mask = jnp.zeros((1, 2, 2, 3)), jnp.ones((1, 2, 2, 4), bool)
    fresh = jnp.ones((1, 2), bool)
    hr = host_agents.HostRole(group, 0, (0, 2), obs, mask, fresh, episode_keys, None, 3)
    with host_agents.bind_host_agents([group], "easy", None):
        (actions,) = jax.jit(lambda: host_agents.host_actions([hr]))()
        actions.block_until_ready()
    keys = [tuple(k) for k in agent.keys[0].tolist()]
    assert len(keys) == 4 and len(set(keys)) == 4
    assert np.asarray(actions).shape == (1, 2, 3)


# ----------------------------------------------------------------------------------------
# run_agent_teams: the checks before the rollout and the stop at a fault
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_cfg():
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell

    return load_cell(os.path.join(demo_root(), BACKGROUND), policy_only=True).cfg


def _no_rollout(*args, **kwargs):
    raise AssertionError("the rollout was reached")


def _run(cfg, agent, monkeypatch, run_teams=_no_rollout, **kwargs):
    from alem_eval.evaluate import agent_runs

    monkeypatch.setattr(agent_runs, "run_teams", run_teams)
    return agent_runs.run_agent_teams(
        [cfg, cfg], [None, None], [(1, 0, 0), (0, 0, 0)], {1: agent},
        protocol="fast", eval_difficulty="easy", num_episodes=FAST_EPISODES, max_steps=40,
        **kwargs,
    )  # fmt: skip


def test_a_run_stops_at_the_call_in_which_an_agent_faults(monkeypatch, demo_cfg):
    """The play core reports progress after every compiled call: the call after a fault
    is not played, and only the teams handed on before it are kept."""
    monkeypatch.setattr("alem_eval.evaluate.agent_runs.probe_group", lambda *a: None)
    calls: list[str] = []

    def play_core(cfgs, weights, teams, *, agents, on_team, on_progress=None, **kwargs):
        report = on_progress or (lambda _p: None)
        report("call 1")
        on_team(0, [{"x": 1.0}])  # a team whose episodes all ended in call 1
        calls.append("call 1")
        host_agents._fail(agents[1].key, "focal h: act raised RuntimeError: boom")  # in call 2
        report("call 2")
        calls.append("call 3")  # (played on: never, once the fault is known)
        on_team(1, [{"x": 2.0}])

    kept: list[int] = []
    with pytest.raises(EvaluationError) as err:
        _run(demo_cfg, Host("h"), monkeypatch, play_core, on_team=lambda i, r: kept.append(i))
    assert str(err.value) == "focal h: act raised RuntimeError: boom"
    assert calls == ["call 1"] and kept == [0]


@pytest.mark.slow
def test_a_host_agents_wrong_output_fails_on_its_probe_step_before_the_rollout(
    monkeypatch, demo_cfg
):
    agent = Host("short", lambda o, m, k: np.zeros(len(o) - 1, np.int32))
    with pytest.raises(EvaluationError) as err:
        _run(demo_cfg, agent, monkeypatch)
    assert str(err.value) == (
        "focal short: act must return 1 integer actions (one per row), got int32 [0]"
    )


class Leaky:
    """Builds its weights inside ``act`` and keeps them: a tracer escapes its trace."""

    name = "leaky"

    def __init__(self):
        self.w = None

    def init(self, batch):
        return None

    def act(self, carry, obs, mask, key):
        if self.w is None:
            self.w = jnp.ones((obs.shape[1], mask.shape[1]))
        logits = jnp.where(mask, obs @ self.w, -jnp.inf)
        return carry, jnp.argmax(logits, axis=-1).astype(jnp.int32)


@pytest.mark.slow
def test_a_tracer_escaping_a_jax_agents_act_is_one_line_naming_it(monkeypatch, demo_cfg):
    from alem_eval.evaluate.agent_spec import load_focal

    group = dataclasses.replace(load_focal(Leaky()), label="my_agents.py:leaky")
    with pytest.raises(EvaluationError) as err:
        _run(demo_cfg, group, monkeypatch)
    msg = str(err.value)
    assert msg.startswith("focal my_agents.py:leaky: act leaked a traced value")
    assert "weights made inside act" in msg and "\n" not in msg


# ----------------------------------------------------------------------------------------
# Several devices: host agents play on one, with their own rows' carry
# ----------------------------------------------------------------------------------------
_TWO_DEVICES = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache()
    import jax
    from alem_eval.evaluate.agent_runs import run_agent_teams
    from alem_eval.evaluate.programs import _PROGRAMS
    from alem_eval.evaluate.reference_agents import Scripted, ScriptedHost
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell
    assert jax.local_device_count() == 2, jax.devices()
    cfg = load_cell(os.path.join(demo_root(), {cell!r}), policy_only=True)
    notes = []

    def run(agents, teams):
        n = len(agents) + 1
        return run_agent_teams([cfg.cfg] * n, [cfg.weights] + [None] * (n - 1), teams,
                               agents, protocol="fast", eval_difficulty="easy",
                               num_episodes={episodes}, max_steps=40, batch=16,
                               on_note=notes.append).records

    # the script as a JAX agent (episodes over both devices), visitor and resident ...
    jax_records = run({{1: Scripted()}}, [(1, 0, 0), (1, 1, 0)])
    # ... and as two host agents in one run (each its own callback and carry)
    host_records = run({{1: ScriptedHost(), 2: ScriptedHost(name="scripted-host-2")}},
                       [(1, 0, 0), (1, 1, 0), (2, 0, 0), (2, 2, 0)])
    devices = sorted(k.num_devices for k in _PROGRAMS)
    print("RESULT" + json.dumps({{"jax": jax_records, "host": host_records,
                                 "devices": devices, "notes": notes}}))
""")


@pytest.mark.slow
@pytest.mark.xdist_group("focal-two-devices")  # its own process: may run beside the others
def test_host_agents_on_two_devices_play_the_jax_scripts_records():
    script = _TWO_DEVICES.format(repo=str(REPO), cell=BACKGROUND, episodes=FAST_EPISODES)
    out = run_on_host_devices(script, 2)
    assert out["devices"] == [1, 2]  # the host run on one device, the JAX run on two
    visitor, resident = out["jax"]
    assert len(visitor) == len(resident) == FAST_EPISODES
    assert out["host"] == [visitor, resident, visitor, resident]
    assert out["notes"] == [
        "host agents play on one of the 2 devices (one callback per step holds all of an "
        "agent's rows)"
    ]
