"""Benchmark: what one evaluator step costs beyond its parts (not a test).

Times the first ``--steps`` steps of the continuous-batching loop (every slot live, no
episode has ended yet) on the cell's stack, in three variants of :class:`Machine`:

* ``cond``: as shipped -- the output-buffer writes and the refill run under a
  ``lax.cond``, only on steps where an episode ended or a slot waits;
* ``uncond``: the same writes and refill on every step;
* ``bare``: no writes and no refill at all (the floor of the loop around the parts);
* ``call``: the shipped compiled call itself (``advance``: a ``while_loop`` of ``cond``
  steps whose whole loop state -- slots, output buffer, schedule -- is its output; in the
  three scans above XLA may drop what their summed output does not need);

beside the parts alone over the same slots: the env with random legal actions, the
stacked policy step (``bench/continuous_batching.py``'s limit). Then what sharing one
loop costs the parts, with no evaluator code at all:

* ``seq``: the env's scan, then the policy's scan, in one program (the limit, if the two
  parts did not meet);
* ``interleaved``: both in one scan, step by step (the policy acts on the env's new
  observation; the env still plays random actions, so nothing else differs from ``seq``);
* ``churn``: a ``--churn-mib`` buffer rewritten once per step, alone, and
  ``policy+churn``: the policy step with that rewrite between its steps. Their difference
  is the policy's cost when something else sweeps the caches between its steps, as the
  env does in the loop.

Best of ``--repeats``, alternating, in one process.

    .venv/bin/python bench/step_overhead.py [--batch 10] [--checkpoints 5] [--steps 64]
        [--churn-mib 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools

from continuous_batching import (
    DEFAULT_CELL,
    PART_STEPS,
    best_of,
    captured_run,
    part_callables,
    part_steps,
)


def variant_runner(prog, loop, args, variant: str, steps: int):
    """A jitted ``steps``-step scan of the loop's step in the given variant."""
    import jax

    from alem_eval.evaluate.machine import Machine

    base = prog.machine
    machine = dataclasses.replace(base, cond_refill=variant == "cond")
    if variant == "bare":

        class Bare(Machine):
            def _refill(self, lp, world, *, ports):
                return lp if ports < self.num_slots else super()._refill(lp, world, ports=ports)

        machine = Bare(**{f.name: getattr(machine, f.name) for f in dataclasses.fields(machine)})
    variables, use_mask, dyn, keys, world_obs, world_states, caps = args

    @jax.jit
    def run(lp, variables):
        step = functools.partial(
            machine._step,
            policy=(prog._prepare(variables), use_mask, dyn),
            world=(world_obs, world_states, keys),
            max_steps=caps,
            score_idx=machine._score_idx(world_states),
        )

        def body(x, _):
            new, _ = step(x, log=False)
            return (new._replace(done=x.done) if variant == "bare" else new), None

        out, _ = jax.lax.scan(body, lp, None, length=steps)
        return out.slots.obs.sum() + out.done.rewards.sum()

    return functools.partial(run, loop, variables)


def sharing_callables(seen: dict, churn_mib: int) -> dict:
    """``seq``, ``interleaved``, ``churn`` and ``policy+churn`` (see the module doc), each
    ``PART_STEPS`` steps."""
    import jax
    import jax.numpy as jnp

    prog = seen["prog"]
    env_step, policy_step, start = part_steps(seen)
    keys = jax.random.split(jax.random.PRNGKey(0), PART_STEPS)

    def env_scan(state, obs):
        return jax.lax.scan(lambda c, k: (env_step(c[0], k), None), (state, obs), keys)[0][1]

    def policy_scan(params, carry, obs):
        def body(c, _):
            return policy_step(params, *c), None

        return jax.lax.scan(body, (carry, obs), None, length=PART_STEPS)[0][1]

    @jax.jit
    def seq(state, variables, carry, obs):
        return env_scan(state, obs).sum() + policy_scan(prog._prepare(variables), carry, obs).sum()

    @jax.jit
    def interleaved(state, variables, carry, obs):
        params = prog._prepare(variables)

        def body(c, k):
            state, carry, _ = c
            state, obs = env_step(state, k)
            return (state, *policy_step(params, carry, obs)), None

        return jax.lax.scan(body, (state, carry, obs), keys)[0][2].sum()

    def sweep(buf, obs):  # every element read and written once per step
        return buf * 1.0001 + obs[0, 0, 0]

    @jax.jit
    def churn(buf, obs):
        def body(c, _):
            buf, obs = c
            buf = sweep(buf, obs)
            return (buf, obs + buf[0] * 1e-9), None

        return jax.lax.scan(body, (buf, obs), None, length=PART_STEPS)[0][1].sum()

    @jax.jit
    def policy_churn(variables, carry, obs, buf):
        params = prog._prepare(variables)

        def body(c, _):
            carry, obs, buf = c
            carry, obs = policy_step(params, carry, obs)
            buf = sweep(buf, obs)
            return (carry, obs + buf[0] * 1e-9, buf), None

        return jax.lax.scan(body, (carry, obs, buf), None, length=PART_STEPS)[0][1].sum()

    buf = jnp.zeros((churn_mib * 2**20 // 4,), jnp.float32)
    st, var, carry, obs = (start[k] for k in ("state", "variables", "carry", "obs"))
    return {
        "seq": lambda: seq(st, var, carry, obs),
        "interleaved": lambda: interleaved(st, var, carry, obs),
        "churn": lambda: churn(buf, obs),
        "policy+churn": lambda: policy_churn(var, carry, obs, buf),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--churn-mib", type=int, default=64)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from alem_eval.evaluate.rollout import run_stack
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.model.loader import load_cell
    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()
    cell = load_cell(DEFAULT_CELL, policy_only=True)
    stack = ([cell.cfg] * args.checkpoints, [cell.weights] * args.checkpoints)
    with captured_run() as seen:
        run_stack(
            *stack,
            protocol="fast",
            eval_difficulty=cell.cfg.env.training_difficulty,
            num_episodes=20,
            max_steps=1024,
            batch=args.batch,
        )
    call_args = jax.tree_util.tree_map(jnp.asarray, seen["args"])
    fns = {
        v: variant_runner(seen["prog"], seen["loop"], call_args, v, args.steps)
        for v in ("cond", "uncond", "bare")
    }
    prog, loop = seen["prog"], seen["loop"]
    if args.steps == CHUNK:  # one call runs CHUNK steps while every slot stays live

        def call():
            fresh = jax.tree_util.tree_map(jnp.copy, loop)  # the call donates its loop
            return prog.advance(fresh, *call_args)[0].slots.obs

        fns["call"] = call
    parts = {**part_callables(seen), **sharing_callables(seen, args.churn_mib)}
    fns.update(parts)  # their own scan length: bench PART_STEPS
    walls, _ = best_of(fns, args.repeats)

    n = seen["loop"].slots.t.shape[0]
    rates = {
        name: (PART_STEPS if name in parts else args.steps) * n / w for name, w in walls.items()
    }
    limit = 1 / (1 / rates["env"] + 1 / rates["policy"])
    print(f"{n} slots; slot-steps/s, the ratio to the limit ({limit:.0f}) and to bare:")
    for name, r in rates.items():
        print(f"  {name:12s} {r:8.0f}  {r / limit:.2f}  {r / rates['bare']:.2f}")
    # Per slot-step seconds: the policy's share of policy+churn, against the policy alone.
    churned = 1 / rates["policy+churn"] - 1 / rates["churn"]
    print(
        f"policy step under a {args.churn_mib} MiB sweep per step: {1 / churned:.0f} "
        f"slot-steps/s, {churned * rates['policy']:.2f}x its cost alone"
    )


if __name__ == "__main__":
    main()
