"""Bad input to the evaluator fails early with a clear error; the env layer's small
guarantees (quiet import, eval env construction, upstream's float reductions)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from alem_eval.evaluate.rollout import run_stack, score_stack
from alem_eval.evaluate.settings import EnvVersionWarning, check_env_version
from alem_eval.core.errors import EvaluationError, UsageError
from tests.conftest import REPO
from tests.eval_support import load, with_eval

# No test here compiles a program of the Alem step (each error is raised before): no
# xdist group, so they run on any worker, in the fast lane.

CELL = "tiny/ippo-rnn/easy/seed0"
HYPERMARL = "tiny/hypermarl-rnn/hard/seed0"


def _score(**kw):
    cell = load(CELL)
    args = dict(protocol="fast", eval_difficulty="easy")
    args.update(kw)
    return score_stack([cell.cfg], [cell.weights], **args)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(num_episodes=0), "--episodes must be at least 1"),
        (dict(num_episodes=-3), "--episodes must be at least 1"),
        (dict(max_steps=-1), "--max-steps must be at least 1"),
        (dict(max_steps=0), "--max-steps must be at least 1"),
        (dict(num_episodes=2.5), "--episodes must be an integer"),
        (dict(protocol="sequential"), "unknown protocol 'sequential'"),
        (dict(eval_difficulty="extreme"), "unknown eval difficulty 'extreme'"),
    ],
)
def test_bad_requests_are_usage_errors(kw, message):
    with pytest.raises(UsageError) as err:
        _score(**kw)
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_stack_errors():
    a, m = load(CELL), load("tiny/mappo-rnn/medium/seed0")
    # Algorithms may share a stack (one program scores them, tests/test_teams.py); each
    # checkpoint's weights are still checked against its own config, before compiling.
    with pytest.raises(EvaluationError, match="checkpoint 1: weights lack the policy"):
        score_stack([a.cfg, m.cfg], [a.weights, a.weights], protocol="fast", eval_difficulty="easy")
    with pytest.raises(EvaluationError, match="empty"):
        score_stack([], [], protocol="fast", eval_difficulty="easy")
    with pytest.raises(EvaluationError, match="1 configs but 2"):
        score_stack([a.cfg], [a.weights, a.weights], protocol="fast", eval_difficulty="easy")
    with pytest.raises(EvaluationError, match="lack the policy parameters"):
        score_stack([a.cfg], [m.weights], protocol="fast", eval_difficulty="easy")
    h = load(HYPERMARL)
    with pytest.raises(EvaluationError, match="do not match the configured network"):
        score_stack([a.cfg], [h.weights], protocol="fast", eval_difficulty="easy")


def test_padding_names_some_but_not_all_of_the_teams():
    a = load(CELL)
    for padding in ([0], [1], [-1]):
        with pytest.raises(UsageError, match=r"padding \[.*\] must name some, not all, of"):
            run_stack([a.cfg], [a.weights], eval_difficulty="easy", padding=padding)


def test_reference_needs_an_evaluated_difficulty():
    with pytest.raises(EvaluationError, match="EVAL_DIFFICULTIES=\\['easy'\\]"):
        _score(protocol="reference", eval_difficulty="hard")


def test_env_version_mismatch_error_or_warn():
    cell = load(CELL)
    other = dataclasses.replace(cell.cfg, env_version="v0.2.1")
    with pytest.raises(EvaluationError, match=r"trained on .*v0\.2\.1.*--on-env-mismatch warn"):
        score_stack([other], [cell.weights], protocol="fast", eval_difficulty="easy")
    with pytest.warns(EnvVersionWarning, match="installed alem"):
        msg = check_env_version(other, on_mismatch="warn", where="x")
    assert msg and msg.startswith("x: ")
    assert "install alem-env" not in msg  # 0.1.0, the paper's, is what is installed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_env_version(other, on_mismatch="ignore") is not None
        assert check_env_version(cell.cfg) is None  # fixture matches the installed 0.1.0
    with pytest.raises(UsageError, match="env-version policy"):
        check_env_version(other, on_mismatch="maybe")


def test_hypermarl_without_agent_id_is_refused():
    cell = load(HYPERMARL)
    cfg = with_eval(cell.cfg, append_agent_id=False)
    with pytest.raises(EvaluationError, match="APPEND_AGENT_ID"):
        score_stack([cfg], [cell.weights], protocol="fast", eval_difficulty="hard")


def test_eval_env_matches_upstream_construction():
    from alem_eval.envs.eval_env import EnvStatics, get_eval_env

    from alem_eval.evaluate.settings import eval_statics

    cfg = load(CELL).cfg
    statics = eval_statics(cfg)
    assert statics == EnvStatics("Alem-Coop-Symbolic", 3, 4, False, False, True, False)
    env = get_eval_env(statics)
    a = env.alem
    for d in ("easy", "medium", "hard"):
        expected = a.EnvParams(
            shared_reward=False,
            randomize_alpha=False,
            **a.get_coordination_params(d, scale_base=False),
        )
        assert env.env_params(d) == expected
        dyn = env.difficulty_params(d)
        for f, v in dyn.items():  # the traced values are upstream's, as int32/float32
            assert v == np.asarray(getattr(expected, f), v.dtype)
        bound = env.bind({f: getattr(expected, f) for f in dyn})
        assert bound.default_params == expected
    assert set(env.dynamic_fields) == {
        "p_max_agents",
        "handover_window_min",
        "handover_window_max",
        "soft_solo_fail_prob",
        "non_specialist_efficiency",
    }
    assert env.static_env_params == a.StaticEnvParams(player_count=3, num_comm_channels=4)
    pqn = eval_statics(load("tiny/pqn-vdn-rnn/easy/seed0").cfg)
    assert pqn.append_agent_id and pqn.input_dim == 9733
    hyp = eval_statics(load(HYPERMARL).cfg)
    assert hyp.append_agent_id and hyp.input_dim == 9733
    assert not eval_statics(load("tiny/mappo-rnn/medium/seed0").cfg).append_agent_id


def test_upstream_mean_reproduces_eager_float32_mean():
    from alem_eval.envs.eval_env import upstream_mean

    x = np.float32(99.36842346191406)
    # the eager mean of a broadcast scalar is not the scalar (1 ulp off), as upstream logs it
    assert upstream_mean(np.array([x, x, x])) == 99.3684310913086
    assert upstream_mean(np.array([0.0, 100.0, 0.0], np.float32)) == 33.333335876464844
    assert upstream_mean(np.array([1, 2, 4], np.int32)) == float(jnp.array([1, 2, 4]).mean())


@pytest.mark.slow  # a fresh interpreter imports alem (its texture cache): ~10-20 s
def test_importing_alem_env_is_light_and_the_loader_is_quiet():
    code = (
        "import sys, alem_eval.envs; assert 'alem' not in sys.modules and 'jax' not in sys.modules;"
        "from alem_eval.envs.loader import import_alem, IMPORT_MESSAGES; m = import_alem();"
        "print('VERSION', m.env_version)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["VERSION v0.13741-fix-construction-more-metrics"]
