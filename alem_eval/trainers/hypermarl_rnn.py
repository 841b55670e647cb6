"""HyperMARL-IPPO-RNN: IPPO whose actor and critic heads are generated per agent by
hypernetworks from learned agent embeddings.

Algorithm facts kept from upstream (``baselines/ippo_hypermarl_rnn.py``, spec §1.4, §5):
* the policy input is the raw observation followed by the one-hot agent id
  (APPEND_AGENT_ID, upstream's AppendAgentIDWrapper); the network
  (``alem_eval.model.networks.HyperActorCriticRNN``) strips the id before its trunk and uses it to
  pick each row's generated heads;
* everything else is IPPO's (``alem_eval.trainers.ippo_rnn``, which this module reuses section by
  section): actors = agents x envs with their own GRU carries, masked categorical policy,
  GAE, clipped PPO, Adam with linear annealing (LR 1e-4 in the yaml);
* the training env uses 3 players and the difficulty preset (NUM_AGENTS and the
  SOFT_SPECIALIZATION / *_EFFICIENCY keys are not applied, as upstream;
  ``alem_eval.envs.training``);
* saved: a flax TrainState ``{step, params: {params: ...}, opt_state}``.

What differs from IPPO lives in the network spec, so IPPO's rollout and update serve
unchanged: ``spec.appends_agent_id`` makes the rollout append the id one-hot, and
``spec.apply_constants`` generates the heads once per rollout instead of once per step (the
loss regenerates them, so gradients flow into the hypernetworks).

Sections: 1. config  2. maths  3. rollout  4. update  5. make_train  6. entry point.
"""

from __future__ import annotations

# ========================================================================================
# 1. Config
# ========================================================================================
import sys

from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import PPOTrainConfig

from alem_eval.trainers.common import Trainer, cached_trainer, gae, ppo_actor_loss, ppo_value_loss

ALGORITHM = "hypermarl-rnn"
# Hyperparameters: alem_eval.algorithms.train_config.PPOTrainConfig, built by
# build_train_config() from the resolved run config (upstream hypermarl_rnn.yaml defaults,
# spec §5).

# ========================================================================================
# 2. Maths: IPPO's (gae, ppo_actor_loss, ppo_value_loss and the shared PPO loss)
# ========================================================================================
from alem_eval.trainers.ippo_rnn import Transition, ppo_loss  # noqa: E402

__all__ = [
    "ALGORITHM",
    "gae",
    "ppo_actor_loss",
    "ppo_value_loss",
    "ppo_loss",
    "Transition",
    "make_train",
]

# ========================================================================================
# 3. Rollout: IPPO's (the id one-hot and the generated heads come from the network spec)
# ========================================================================================
from alem_eval.trainers.ippo_rnn import Envs, make_rollout  # noqa: E402,F401

# ========================================================================================
# 4. Update: IPPO's
# ========================================================================================
from alem_eval.trainers.ippo_rnn import make_update  # noqa: E402,F401


# ========================================================================================
# 5. make_train
# ========================================================================================
def build_trainer(run: RunConfig, tcfg: PPOTrainConfig) -> Trainer:
    from alem_eval.trainers.ippo_rnn import build_trainer as build_ippo_trainer

    if run.algorithm != ALGORITHM:
        raise ValueError(f"{run.algorithm} config given to the {ALGORITHM} trainer")
    return build_ippo_trainer(run, tcfg)


def make_train(run: RunConfig, tcfg: PPOTrainConfig) -> Trainer:
    """The (cached) trainer for this config; see :func:`alem_eval.trainers.driver.train_cells`."""
    return cached_trainer(run, tcfg, build_trainer)


# ========================================================================================
# 6. Entry point: ``python -m alem_eval.trainers.hypermarl_rnn CELL [options]`` = ``alem-eval train CELL``
# ========================================================================================
if __name__ == "__main__":
    from alem_eval.cli.app import run

    run(["train", *sys.argv[1:]])
