"""The environment for loops of your own: ``alem_eval.make_env`` (from a difficulty or a
cell, alone or with frozen partners acting inside a pure step) and ``alem_eval.parallel_env``
(PettingZoo's ParallelEnv, checked with PettingZoo's own ``parallel_api_test``).

The partner tests use the bundled demo cells of the ``train`` split as partners and a demo
cell as the focal's env; they share one compiled reset and step (the group below)."""

from __future__ import annotations

import runpy

import jax
import numpy as np
import pytest

import alem_eval
from alem_eval.core.errors import SelectorError, UsageError

from .conftest import REPO

FOCAL = "demo/ippo-rnn/easy/seed0"
TRAIN_PARTNERS = (
    "demo/ippo-rnn/easy/seed0",
    "demo/mappo-rnn/easy/seed0",
    "demo/pqn-vdn-rnn/easy/seed0",
)
PARTNER_ENV = "partner-env"  # xdist group: the partner env's compiled reset and step


# ----------------------------------------------------------------------------------------
# Building one (no compilation)
# ----------------------------------------------------------------------------------------
def test_make_env_of_a_cell_has_its_configuration_and_the_action_names():
    env = alem_eval.make_env(FOCAL, source="demo")
    assert (env.num_agents, env.num_actions, env.obs_dim) == (3, 60, 9730)
    assert env.difficulty == "easy" and env.focal_slots == (0, 1, 2) and env.partners == ()
    assert env.action_masking and env.num_comm_channels == 4
    names = env.action_names
    assert len(names) == env.num_actions == len(set(names))
    assert names[:6] == ("NOOP", "LEFT", "RIGHT", "UP", "DOWN", "DO")
    assert names[54:] == ("GIVE", "GIVE_1", "COMM_0", "COMM_1", "COMM_2", "COMM_3")
    two = alem_eval.make_env("hard", num_comm_channels=2)
    assert two.num_actions == 58 and two.action_names[-2:] == ("COMM_0", "COMM_1")
    assert alem_eval.make_env(FOCAL, source="demo", difficulty="hard").difficulty == "hard"


def test_partners_are_the_selection_of_their_split_in_slots_other_than_the_focals():
    env = alem_eval.make_env(FOCAL, partners="demo/*", split="train", source="demo")
    assert env.partners == TRAIN_PARTNERS and env.focal_slots == (0,)
    held_out = alem_eval.make_env(
        "easy", partners="demo/*", split="test", source="demo", focal_slots=(2, 0)
    )
    assert held_out.partners == ("demo/hypermarl-rnn/easy/seed0",)
    assert held_out.focal_slots == (0, 2)


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        (dict(partners="demo/nothing"), SelectorError, "matches no cell"),
        (dict(partners="demo/*", split="dev"), UsageError, "unknown split 'dev'"),
        (dict(partners="demo/*", split="val"), SelectorError, "is in split 'val'"),
        (dict(partners="demo/ippo", focal_slots=(0, 1, 2)), UsageError, "leave no slot"),
        (dict(partners="demo/ippo", focal_slots=(3,)), UsageError, "distinct slots in 0..2"),
        (dict(focal_slots=(0,)), UsageError, "nobody would play the other slots"),
    ],
)
def test_bad_partner_requests_are_one_line_errors(kwargs, error, fragment):
    with pytest.raises(error) as exc:
        alem_eval.make_env(FOCAL, source="demo", **kwargs)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_partners_of_another_env_configuration_are_refused():
    with pytest.raises(UsageError, match=r"demo/ippo-rnn/easy/seed0 needs another env .*4 vs 2"):
        alem_eval.make_env("easy", num_comm_channels=2, partners="demo/ippo", source="demo")
    with pytest.raises(UsageError, match="make_env takes one cell"):
        alem_eval.make_env("demo/*", source="demo")


# ----------------------------------------------------------------------------------------
# Partners inside the step (compiles the step with the partners' networks)
# ----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group(PARTNER_ENV)
def test_partners_act_as_their_greedy_released_policies_inside_a_jitted_vmapped_step():
    env = alem_eval.make_env(FOCAL, partners="demo/*", split="train", source="demo")
    policies = {c: alem_eval.load_policy(c, source="demo") for c in env.partners}
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    reset = jax.jit(jax.vmap(lambda e, k: e.reset(k), in_axes=(None, 0)))
    step = jax.jit(jax.vmap(lambda e, k, s, a: e.step(k, s, a), in_axes=(None, 0, 0, 0)))
    obs, state = reset(env, keys)
    drawn = [env.partners[int(p)] for p in np.asarray(state.partner)]
    assert len(set(drawn)) > 1, drawn  # drawn per environment
    assert obs.shape == (4, 1, env.obs_dim)
    carries = [policies[c].init(1) for c in drawn]
    for t in range(3):
        mask = jax.vmap(env.action_mask)(state)  # [B, F, A]
        assert mask.shape == (4, 1, env.num_actions)
        focal_actions = np.argmax(np.asarray(mask), axis=-1).astype(np.int32)  # first legal
        expected = []
        for i, cell in enumerate(drawn):  # the released greedy policy on the same inputs
            carries[i], a = policies[cell].act(carries[i], state.obs[i][None], state.mask[i][None])
            expected.append(np.asarray(a[0]))
        obs, state, rewards, done, info = step(
            env, jax.random.split(jax.random.PRNGKey(t), 4), state, focal_actions
        )
        played = np.asarray(info["actions"])
        assert (played[:, 1:] == np.stack(expected)[:, 1:]).all(), t
        assert (played[:, 0] == focal_actions[:, 0]).all()
        assert obs.shape == (4, 1, env.obs_dim) and rewards.shape == (4, 1)
        assert info["agent_dones"].shape == (4, 1) and done.shape == (4,)
        assert info["action_mask"].shape == (4, 1, env.num_actions)


@pytest.mark.slow
@pytest.mark.xdist_group(PARTNER_ENV)
def test_parallel_env_passes_pettingzoo_parallel_api_test():
    from pettingzoo.test import parallel_api_test

    pz = alem_eval.parallel_env(
        FOCAL, partners="demo/*", split="train", source="demo", max_steps=12
    )
    assert pz.possible_agents == ["agent_0"]
    space = pz.observation_space("agent_0")
    assert space.shape == (9730,) and pz.action_space("agent_0").n == 60
    parallel_api_test(pz, num_cycles=30)
    obs, infos = pz.reset(seed=5)
    mask = infos["agent_0"]["action_mask"]
    assert mask.dtype == np.int8 and mask.shape == (60,) and space.contains(obs["agent_0"])
    action = pz.action_space("agent_0").sample(mask)
    assert mask[action] == 1
    for _ in range(12):
        obs, rewards, terms, truncs, infos = pz.step({"agent_0": action})
        if terms["agent_0"] or truncs["agent_0"]:
            break
        action = int(np.argmax(infos["agent_0"]["action_mask"]))
    assert truncs["agent_0"] and pz.agents == []
    with pytest.raises(UsageError, match="call reset"):
        pz.step({"agent_0": 0})


@pytest.mark.slow
@pytest.mark.xdist_group(PARTNER_ENV)
def test_the_numpy_learner_example_trains_against_two_baseline_partners(capsys):
    example = runpy.run_path(str(REPO / "examples" / "numpy_learner.py"))
    returns = example["main"](["--steps", "30", "--max-steps", "12"])
    assert len(returns) == 2 and all(np.isfinite(returns))
    assert "2 episodes; mean return" in capsys.readouterr().out


def test_partners_of_one_network_are_stacked_rows_of_their_released_weights():
    from .conftest import FIXTURES

    cells = ("tiny/ippo-rnn/easy/seed0", "tiny/ippo-rnn/hard/seed2")
    env = alem_eval.make_env(cells[0], partners="tiny/ippo-rnn", source=str(FIXTURES))
    assert env.partners == cells and len(env.partner_params) == 1  # one network group
    stacked = jax.tree_util.tree_leaves(env.partner_params[0])
    for row, cell in enumerate(cells):
        own = jax.tree_util.tree_leaves(alem_eval.load_policy(cell, source=str(FIXTURES)).params)
        assert len(own) == len(stacked)
        for mine, theirs in zip(stacked, own, strict=True):
            np.testing.assert_array_equal(np.asarray(mine)[row], np.asarray(theirs))


def test_parallel_env_without_the_pettingzoo_extra_is_a_one_line_error_naming_it():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pettingzoo'] = None\n"
        "import alem_eval\n"
        "from alem_eval.core.errors import MissingExtraError\n"
        "try:\n"
        "    alem_eval.parallel_env\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "alem_eval.parallel_env needs pettingzoo, which is not installed: "
        "pip install 'alem-eval[pettingzoo]'"
    )
