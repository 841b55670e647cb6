"""``alem-eval train CELL --partners SELECTOR``: a focal policy trained with frozen partners.

The maths and the partners' step are checked at module level (no Alem step compiled): only
the focal's slots enter the loss, and the partners act as ``load_policy``'s greedy policies.
Training itself runs at the trainer tests' tiny sizes (2 updates of 4 envs x 8 steps) with
the bundled demo cells as partners: one IPPO program (interrupted, resumed, verified,
scored) and one MAPPO program (two focal slots).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alem_eval.algorithms.train_config import build_train_config, training_run_config
from alem_eval.core.errors import ConfigError

from .eval_support import FAST_EPISODES
from .test_trainers import PPO_TINY, _restore_full

TINY_STEPS = 2 * PPO_TINY["NUM_ENVS"] * PPO_TINY["NUM_STEPS"]  # 2 updates
DEMO_TRAIN = (
    "demo/ippo-rnn/easy/seed0",
    "demo/mappo-rnn/easy/seed0",
    "demo/pqn-vdn-rnn/easy/seed0",
)


def _run(algo: str = "ippo-rnn", **overrides):
    return training_run_config(
        algo,
        difficulty="easy",
        seed=0,
        total_timesteps=TINY_STEPS,
        overrides={**PPO_TINY, **overrides},
    )


# ========================================================================================
# Only the focal's slots enter the loss
# ========================================================================================
def _batch(key, T=6, N=4, A=5):
    """A minibatch where actor 0 is a partner throughout, actor 1 switches from partner to
    focal at an episode end (t = 3), the others are focal."""
    from alem_eval.trainers.ippo_rnn import Transition

    ks = jax.random.split(key, 8)
    done = jnp.zeros((T, N), bool).at[2, :].set(True)
    focal = jnp.ones((T, N), bool).at[:, 0].set(False).at[:3, 1].set(False)
    tr = Transition(
        obs=jax.random.normal(ks[0], (T, N, 3)),
        reset=jnp.zeros((T, N), bool),
        action=jax.random.randint(ks[1], (T, N), 0, A),
        log_prob=-jax.random.uniform(ks[2], (T, N), minval=0.5, maxval=2.0),
        value=jax.random.normal(ks[3], (T, N)),
        reward=jax.random.normal(ks[4], (T, N)),
        done=done,
        mask=jnp.ones((T, N, A), bool),
        focal=focal,
    )
    logits = jax.random.normal(ks[5], (T, N, A))
    value = jax.random.normal(ks[6], (T, N))
    return tr, logits, value


def _perturb_partners(tr, logits, value, key):
    """Every partner-slot quantity replaced by noise (rewards, old values and log-probs,
    actions, the network's outputs)."""
    p = ~tr.focal
    ks = jax.random.split(key, 5)

    def noisy(x, k, scale=5.0):
        return jnp.where(p, x + scale * jax.random.normal(k, x.shape), x)

    tr2 = tr._replace(
        reward=noisy(tr.reward, ks[0]),
        value=noisy(tr.value, ks[1]),
        log_prob=jnp.where(p, tr.log_prob - 1.0, tr.log_prob),
        action=jnp.where(p, (tr.action + 1) % logits.shape[-1], tr.action),
    )
    return tr2, jnp.where(p[..., None], logits * 3.0 + 1.0, logits), noisy(value, ks[4])


def _ippo_loss(tr, logits, value, last_value, tcfg):
    from alem_eval.trainers.common import gae
    from alem_eval.trainers.ippo_rnn import ppo_loss

    adv, targets = gae(tr.reward, tr.value, tr.done, last_value, gamma=0.99, lam=0.95)
    return ppo_loss(logits, value, tr, adv, targets, tcfg)[0]


def test_only_the_focal_slots_enter_the_ppo_loss():
    tcfg = build_train_config(_run())
    tr, logits, value = _batch(jax.random.PRNGKey(0))
    last_value = jnp.ones((tr.value.shape[1],))
    loss_fn = jax.value_and_grad(
        lambda lg, v, tr: _ippo_loss(tr, lg, v, last_value, tcfg), argnums=(0, 1)
    )
    loss, (g_logits, g_value) = loss_fn(logits, value, tr)
    tr2, logits2, value2 = _perturb_partners(tr, logits, value, jax.random.PRNGKey(1))
    loss2, (g_logits2, g_value2) = loss_fn(logits2, value2, tr2)
    assert float(loss) == pytest.approx(float(loss2), rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(g_value, g_value2, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(g_logits, g_logits2, rtol=1e-5, atol=1e-8)
    # no gradient reaches a partner slot's outputs
    assert not np.any(np.asarray(g_value)[~np.asarray(tr.focal)])
    assert not np.any(np.asarray(g_logits)[~np.asarray(tr.focal)])
    # ... while a focal slot's reward does count
    tr3 = tr._replace(reward=tr.reward.at[4, 2].add(3.0))
    assert float(loss_fn(logits, value, tr3)[0]) != pytest.approx(float(loss), rel=1e-6)


def test_the_masked_loss_is_the_loss_of_the_focal_slots_alone():
    """Focal slots only (no switching actor): the masked loss equals the unmasked loss of
    the focal actors' columns."""
    from alem_eval.trainers.ippo_rnn import ppo_loss

    tcfg = build_train_config(_run())
    tr, logits, value = _batch(jax.random.PRNGKey(2))
    focal = jnp.ones_like(tr.focal).at[:, :2].set(False)  # actors 2 and 3 are the focal's
    adv = jax.random.normal(jax.random.PRNGKey(3), tr.value.shape)
    targets = tr.value + adv
    masked = ppo_loss(logits, value, tr._replace(focal=focal), adv, targets, tcfg)[0]
    cols = lambda x: x[:, 2:]
    alone = tr._replace(focal=None)
    alone = jax.tree_util.tree_map(lambda x: x[:, 2:], alone)
    plain = ppo_loss(cols(logits), cols(value), alone, cols(adv), cols(targets), tcfg)[0]
    assert float(masked) == pytest.approx(float(plain), rel=1e-5)


def test_mappo_critic_targets_only_on_the_focal_slots():
    from alem_eval.trainers.mappo_rnn import Transition, critic_loss

    tcfg = build_train_config(_run("mappo-rnn"))
    tr, _, value = _batch(jax.random.PRNGKey(4))
    tr = Transition(*tr)
    targets = jax.random.normal(jax.random.PRNGKey(5), value.shape)
    loss = critic_loss(value, tr, targets, tcfg)[0]
    noisy = jnp.where(tr.focal, targets, targets + 100.0)
    assert float(critic_loss(value, tr, noisy, tcfg)[0]) == pytest.approx(float(loss), rel=1e-6)
    assert float(critic_loss(value, tr._replace(focal=None), noisy, tcfg)[0]) > 10 * float(loss)


# ========================================================================================
# The partners: as released, drawn per env and episode
# ========================================================================================
@pytest.fixture(scope="module")
def demo_partners():
    from alem_eval.trainers.partners import load_partners

    return load_partners(["demo/*"], _run(), source="demo", focal_slots=1)


def test_partners_act_as_their_released_greedy_policies(demo_partners):
    """Each partner's actions inside the training step equal ``load_policy``'s on the same
    observations and masks, step after step (its own recurrent carry)."""
    from alem_eval import load_policy

    p = demo_partners
    assert set(p.members) == {
        f"demo/{a}/easy/seed0" for a in ("ippo-rnn", "mappo-rnn", "hypermarl-rnn", "pqn-vdn-rnn")
    }
    assert len(p.policies) == 4  # four network shapes, one group each, in one program
    E, A = 3, p.num_agents
    obs_dim = p.policies[0].spec.obs_dim
    num_actions = p.policies[0].spec.num_actions
    act = jax.jit(p.act)
    for m, cell in enumerate(p.members):
        released = load_policy(cell, source="demo")
        team = p.init_team(jax.random.PRNGKey(0), E)._replace(member=jnp.full((E,), m, jnp.int32))
        carry = released.init(E)
        for t in range(3):
            k_obs, k_mask = jax.random.split(jax.random.PRNGKey(10 * m + t))
            obs = jax.random.normal(k_obs, (E, A, obs_dim))
            mask = (jax.random.uniform(k_mask, (E, A, num_actions)) > 0.4).at[..., 0].set(True)
            team, ours = act(p.params, team, obs, jnp.zeros((E, A), bool), mask)
            carry, theirs = released.act(carry, obs, mask)
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=cell)


def test_partners_are_redrawn_only_where_an_episode_ended(demo_partners):
    p = demo_partners
    team = p.init_team(jax.random.PRNGKey(0), 64)
    assert np.all(np.asarray(team.focal).sum(-1) == 1)  # one focal slot per env
    assert len(set(np.asarray(team.member).tolist())) > 1
    assert len(set(np.argmax(np.asarray(team.focal), -1).tolist())) == 3  # any slot
    done = jnp.arange(64) % 2 == 0
    new = p.redraw(jax.random.PRNGKey(1), team, done)
    kept = ~np.asarray(done)
    np.testing.assert_array_equal(np.asarray(new.member)[kept], np.asarray(team.member)[kept])
    np.testing.assert_array_equal(np.asarray(new.focal)[kept], np.asarray(team.focal)[kept])
    assert np.any(np.asarray(new.member)[~kept] != np.asarray(team.member)[~kept])


# ========================================================================================
# Bad input: one line, non-zero exit, nothing written
# ========================================================================================
def _train_cli(tmp_path, *args):
    from .clitools import run_cli_in_process

    out = tmp_path / "runs"
    cmd = ["train", "demo/ippo-rnn/easy/seed0", "--out", str(out), "--total-timesteps", "4096"]
    proc = run_cli_in_process([*cmd, *args], dict(COLUMNS="200"))
    return proc, out


@pytest.fixture
def broken_demo(tmp_path):
    """The demo cells, with MAPPO's config.json logging a parameter count its weights lack."""
    from alem_eval.hub.demo_cells import ensure_demo_source

    root = tmp_path / "cells"
    shutil.copytree(ensure_demo_source(), root)
    cfg = root / "demo/mappo-rnn/easy/seed0/config.json"
    data = json.loads(cfg.read_text())
    data["wandb_summary"]["num_params"] += 1
    cfg.write_text(json.dumps(data))
    return root


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "demo", "--partners", "demo/*/hard"], "hard"),
        (
            ["--source", "demo", "--partners", "demo/*", "--focal-slots", "3"],
            "--focal-slots must be 1 or 2",
        ),
        (
            ["--source", "demo", "--partners", "demo/*", "--set", "NUM_COMM_CHANNELS=2"],
            "env configuration differs: num_comm_channels",
        ),
        (["--source", "demo", "--partners", "demo/*", "--split", "nope"], "nope"),
        (
            ["--source", "demo", "--focal-slots", "2"],
            "--focal-slots applies to training with --partners",
        ),
        (
            [
                "--source",
                "demo",
                "--partners",
                "demo/*",
                "--split",
                "test",
                "--splits",
                "missing.json",
            ],
            "missing.json",
        ),
    ],
    ids=["no-match", "focal-slots", "env", "split-name", "no-partners", "splits-file"],
)
def test_bad_partner_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    proc, out = _train_cli(tmp_path, *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists()


def test_a_partner_that_fails_verification_is_refused(tmp_path, broken_demo):
    proc, out = _train_cli(tmp_path, "--source", str(broken_demo), "--partners", "demo/*")
    assert proc.returncode != 0
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("alem-eval: error: partner demo/mappo-rnn/easy/seed0 fails verification")
    assert not out.exists()


@pytest.mark.parametrize("algo", ["hypermarl-rnn", "pqn-vdn-rnn"])
def test_algorithms_without_partner_training_are_refused(tmp_path, algo):
    from .clitools import run_cli_in_process

    out = tmp_path / "runs"
    proc = run_cli_in_process(
        [
            "train",
            f"demo/{algo}/easy/seed0",
            "--source",
            "demo",
            "--partners",
            "demo/*",
            "--out",
            str(out),
            "--total-timesteps",
            "4096",
        ],
        dict(COLUMNS="200"),
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"alem-eval: error: demo/{algo}/easy/seed0: {algo} is not supported yet with "
        "--partners (supported: ippo-rnn, mappo-rnn)"
    ]
    assert not out.exists()


# ========================================================================================
# Training with partners, end to end
# ========================================================================================
def _options(out: Path, **kw):
    from alem_eval.trainers.planning import TrainOptions

    settings = dict(
        out=out,
        total_timesteps=TINY_STEPS,
        overrides=dict(PPO_TINY),
        source="demo",
        partners=("demo/*",),
        split="train",
    )
    return TrainOptions(**{**settings, **kw})


@pytest.fixture(scope="module")
def ippo_trained(tmp_path_factory):
    """IPPO with the train-split demo cells: stopped after one update (resume state),
    refused with other partners, then resumed to the end."""
    from alem_eval.hub.demo_cells import ensure_demo_source
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.trainers.planning import train

    demo = ensure_demo_source()
    hashes = {c: checkpoint_hash(demo / c / "checkpoint") for c in DEMO_TRAIN}
    out = tmp_path_factory.mktemp("partners") / "runs"
    [stopped] = train(["demo/ippo-rnn/easy/seed0"], _options(out, max_updates=1))
    assert stopped.results is None
    with pytest.raises(ConfigError) as other:
        train(["demo/ippo-rnn/easy/seed0"], _options(out, split=None))
    [outcome] = train(["demo/ippo-rnn/easy/seed0"], _options(out))
    after = {c: checkpoint_hash(demo / c / "checkpoint") for c in DEMO_TRAIN}
    return outcome, out, hashes, after, str(other.value)


@pytest.mark.slow
@pytest.mark.xdist_group("train-partners-ippo")
def test_a_partner_trained_cell_records_its_partners_verifies_and_scores(ippo_trained, tmp_path):
    from alem_eval.analysis.results import open_store
    from alem_eval.hub.sources import open_source
    from alem_eval.model.verify import verify_cells
    from alem_eval.scoring.score import ScoreOptions, score_cells

    outcome, out, hashes, _, _ = ippo_trained
    [result] = outcome.results
    assert result.summary["resumed_from_update"] == 1 and result.summary["num_updates"] == 2
    cfg = json.loads((result.cell_dir / "config.json").read_text())
    partners = cfg["partners"]
    assert sorted(partners["cells"]) == sorted(DEMO_TRAIN)  # the demo train split
    assert partners["checkpoint_hashes"] == hashes
    assert partners["split"] == "train" and partners["focal_slots"] == 1
    assert partners["splits"]["digest"]

    src = open_source(str(out))
    cells = src.select(["demo/ippo-rnn/easy/seed0"])
    [verified] = verify_cells(src, cells)
    assert verified.ok, verified.message
    [score] = score_cells(
        src,
        cells,
        options=ScoreOptions(num_episodes=FAST_EPISODES, max_steps=8),
        store=open_store(tmp_path / "results"),
    )
    assert len(score.episodes) == FAST_EPISODES
    assert math.isfinite(score.aggregate["episode_return"])


@pytest.mark.slow
@pytest.mark.xdist_group("train-partners-ippo")
def test_partner_weights_are_unchanged_and_outside_the_optimiser(ippo_trained):
    from alem_eval.model.networks import build_network

    outcome, out, hashes, after, _ = ippo_trained
    assert after == hashes  # the partners' checkpoints are read, never written
    [result] = outcome.results
    tree = _restore_full(result.cell_dir / "checkpoint")
    cfg = json.loads((result.cell_dir / "config.json").read_text())
    spec = build_network(
        training_run_config("ippo-rnn", difficulty="easy", seed=0, overrides={**PPO_TINY})
    )
    leaves = lambda t: sum(np.size(x) for x in jax.tree_util.tree_leaves(t))
    # the optimiser's moments are the focal's parameters', nothing else
    assert leaves(tree["params"]) == spec.num_params() == cfg["wandb_summary"]["num_params"]
    mu = tree["opt_state"][1][0]["mu"]
    assert leaves(mu) == leaves(tree["params"])


@pytest.mark.slow
@pytest.mark.xdist_group("train-partners-ippo")
def test_resuming_with_other_partners_is_refused(ippo_trained):
    *_, refused = ippo_trained
    assert "partners" in refused and "--fresh" in refused


@pytest.mark.slow
def test_mappo_trains_two_focal_slots_with_partners(tmp_path):
    from alem_eval.trainers.planning import train

    out = tmp_path / "runs"
    [outcome] = train(["demo/mappo-rnn/easy/seed0"], _options(out, focal_slots=2))
    [result] = outcome.results
    cfg = json.loads((result.cell_dir / "config.json").read_text())
    assert cfg["partners"]["focal_slots"] == 2 and sorted(cfg["partners"]["cells"]) == sorted(
        DEMO_TRAIN
    )
    assert result.summary["complete"] and result.summary["num_updates"] == 2
