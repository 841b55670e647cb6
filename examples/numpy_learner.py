"""A learner outside JAX: plain numpy REINFORCE in slot 0, two baseline partners in the others.

    pip install 'alem-eval[pettingzoo]'
    python examples/numpy_learner.py --steps 3000

The environment is ``alem_eval.parallel_env`` (PettingZoo's ``ParallelEnv``): the partners
are the bundled demo cells of the ``train`` split (docs/splits.md), one drawn at every
reset, playing slots 1 and 2 with their greedy released policies inside the env's step;
the learner only sees its own observation, reward and action mask (in its info). The
policy is linear-softmax over the legal actions, updated after every episode with the
return-to-go minus a running baseline. A few thousand steps are far too few to learn
Alem: the point is the loop, which any learner of your own (PyTorch, a library of yours)
replaces. It prints the mean return of the first and last episodes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np


def masked_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask > 0, logits, -np.inf)
    z = np.exp(z - z.max())
    return z / z.sum()


def train(steps: int, max_steps: int, seed: int = 0, lr: float = 0.01) -> list[float]:
    """REINFORCE for ``steps`` env steps in episodes of at most ``max_steps``; the return of
    every episode played (a last, unfinished one left out)."""
    import alem_eval

    env = alem_eval.parallel_env(
        "demo/ippo-rnn/easy/seed0",  # the focal's env configuration: a demo cell's
        partners="demo/*",
        split="train",
        focal_slots=(0,),
        source="demo",
        max_steps=max_steps,
    )
    (me,) = env.possible_agents
    rng = np.random.default_rng(seed)
    dim, num_actions = env.observation_space(me).shape[0], env.action_space(me).n
    weights = np.zeros((dim, num_actions))
    baseline, returns = 0.0, []
    obs, infos = env.reset(seed=seed)
    episode: list[tuple[np.ndarray, int, np.ndarray, float]] = []
    for _ in range(steps):
        x, mask = obs[me], infos[me]["action_mask"]
        probs = masked_softmax(x @ weights, mask)
        action = int(rng.choice(num_actions, p=probs))
        obs, rewards, terminations, truncations, infos = env.step({me: action})
        episode.append((x, action, probs, rewards[me]))
        if terminations[me] or truncations[me]:
            total = sum(r for *_, r in episode)
            togo = np.cumsum([r for *_, r in episode][::-1])[::-1]
            for (x_t, a_t, p_t, _), g in zip(episode, togo, strict=True):
                grad = -p_t
                grad[a_t] += 1.0  # d log pi(a|x) / d logits
                weights += lr * (g - baseline) * np.outer(x_t, grad)
            baseline = 0.9 * baseline + 0.1 * total
            returns.append(total)
            episode = []
            obs, infos = env.reset()
    env.close()
    return returns


def main(argv: Sequence[str] | None = None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="env steps in all")
    ap.add_argument("--max-steps", type=int, default=200, help="steps per episode at most")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    returns = train(args.steps, args.max_steps, args.seed)
    if not returns:
        print("no episode finished: give more --steps than --max-steps")
        return returns
    k = max(1, len(returns) // 4)
    print(
        f"{len(returns)} episodes; mean return of the first {k}: {np.mean(returns[:k]):.3f}, "
        f"of the last {k}: {np.mean(returns[-k:]):.3f}"
    )
    return returns


if __name__ == "__main__":
    main()
