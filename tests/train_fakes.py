"""A fake trainer for the training driver's tests: no Alem env, a trivial update, compiled
in a second. ``python -m tests.train_fakes ARGS`` runs ``alem-eval train ARGS`` with IPPO's
trainer replaced by the fake (for the subprocess signal tests).

The fake update is deterministic per seed (a random walk of 4 weights driven by the
state's key), so resumed and uninterrupted runs must end bit-identical.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

import jax
import jax.numpy as jnp

from alem_eval.algorithms.train_config import build_train_config, training_run_config
from alem_eval.trainers.common import RunnerState, Trainer

ALGO = "ippo-rnn"
SIZES = {"NUM_ENVS": 2, "NUM_STEPS": 2, "NUM_MINIBATCHES": 2}
STEPS_PER_UPDATE = SIZES["NUM_ENVS"] * SIZES["NUM_STEPS"]
SLEEP_ENV = "ALEM_EVAL_FAKE_UPDATE_S"  # seconds each compiled call takes (subprocess tests)


def runs_of(seeds, updates, **overrides):
    runs = [
        training_run_config(
            ALGO,
            difficulty="easy",
            seed=s,
            total_timesteps=updates * STEPS_PER_UPDATE,
            overrides={**SIZES, **overrides},
        )
        for s in seeds
    ]
    return runs, [build_train_config(r) for r in runs]


@dataclass(frozen=True, eq=False)
class SlowTrainer(Trainer):
    """A Trainer whose compiled update call also sleeps ``sleep_s`` (so that a signal from
    another process lands mid-run)."""

    sleep_s: float = 0.0

    def compiled(self, shardings=None, key=None):
        init, update_n = super().compiled(shardings, key)
        if not self.sleep_s:
            return init, update_n

        def slow(*args):
            time.sleep(self.sleep_s)
            return update_n(*args)

        return init, slow


def make_fake(run, tcfg, *, sleep_s: float = 0.0) -> SlowTrainer:
    def init(key, plan):
        k_w, k_run = jax.random.split(key)
        learner = {"w": jax.random.normal(k_w, (4,)), "step": jnp.zeros((), jnp.int32)}
        envs = {"obs": jnp.zeros((tcfg.num_envs, 3))}
        return RunnerState(learner, envs, k_run, jnp.zeros((), jnp.int32), plan)

    def update(state, warm):
        key, k = jax.random.split(state.key)
        w = 0.9 * state.learner["w"] + jax.random.normal(k, (4,))
        learner = {"w": w, "step": state.learner["step"] + 1}
        ret = w.sum()
        totals = {
            "env_steps": jnp.float32(tcfg.steps_per_update),
            "reward": ret,
            "episodes": jnp.float32(1.0),
            "return": ret,
            "length": jnp.float32(10.0),
            "achievement_pct": jnp.float32(0.5),
            "normal_achievement_pct": jnp.float32(0.5),
            "coordination_achievement_pct": jnp.float32(0.0),
            "loss/total": w[0],
        }
        return state.replace(learner=learner, key=key, updates=state.updates + 1), totals

    spec = SimpleNamespace(num_params=lambda: 4)
    tenv = SimpleNamespace(env_version="fake", coord_params={}, num_agents=3)
    return SlowTrainer(
        run.algorithm,
        run,
        tcfg,
        spec,
        tenv,
        init,
        update,
        released=lambda s: {"w": s.learner["w"], "step": s.learner["step"]},
        sleep_s=sleep_s,
    )


def main(argv: list[str]) -> None:
    """``alem-eval train ARGV`` with the fake in place of IPPO's trainer (reached, like the
    real one, through the registry's ``trainer_module``)."""
    import alem_eval.trainers.ippo_rnn as ippo

    sleep_s = float(os.environ.get(SLEEP_ENV, "0"))
    ippo.make_train = lambda run, tcfg: make_fake(run, tcfg, sleep_s=sleep_s)
    from alem_eval.cli.app import main as cli_main

    cli_main(["train", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
