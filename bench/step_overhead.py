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
stacked policy step (``bench/continuous_batching.py``'s limit). Best of ``--repeats``,
alternating, in one process.

    .venv/bin/python bench/step_overhead.py [--batch 10] [--checkpoints 5] [--steps 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools

from continuous_batching import DEFAULT_CELL, best_of, captured_run, part_callables


def variant_runner(prog, loop, args, variant: str, steps: int):
    """A jitted ``steps``-step scan of the loop's step in the given variant."""
    import jax

    from alem_eval import evaluate as ev

    base = prog.machine
    machine = dataclasses.replace(base, cond_refill=variant == "cond")
    if variant == "bare":

        class Bare(ev.Machine):
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from alem_eval import evaluate as ev
    from alem_eval.loader import load_cell
    from alem_eval.runtime import enable_compilation_cache

    enable_compilation_cache()
    cell = load_cell(DEFAULT_CELL, policy_only=True)
    stack = ([cell.cfg] * args.checkpoints, [cell.weights] * args.checkpoints)
    with captured_run() as seen:
        ev.run_stack(
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
    if args.steps == ev.CHUNK:  # one call runs CHUNK steps while every slot stays live

        def call():
            fresh = jax.tree_util.tree_map(jnp.copy, loop)  # the call donates its loop
            return prog.advance(fresh, *call_args)[0].slots.obs

        fns["call"] = call
    fns.update(part_callables(seen))  # their own scan length: bench PART_STEPS
    walls, _ = best_of(fns, args.repeats)
    from continuous_batching import PART_STEPS

    n = seen["loop"].slots.t.shape[0]
    rates = {
        name: (PART_STEPS if name in ("env", "policy") else args.steps) * n / w
        for name, w in walls.items()
    }
    limit = 1 / (1 / rates["env"] + 1 / rates["policy"])
    print(f"{n} slots; slot-steps/s, the ratio to the limit ({limit:.0f}) and to bare:")
    for name, r in rates.items():
        print(f"  {name:8s} {r:8.0f}  {r / limit:.2f}  {r / rates['bare']:.2f}")


if __name__ == "__main__":
    main()
