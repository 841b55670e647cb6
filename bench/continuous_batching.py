"""Benchmark: slot utilisation and live throughput of continuous batching (not a test).

A batch of ``K`` copies of a checkpoint x ``E`` episodes is scored with the fast protocol
at several batch sizes, all in one process:

* ``all at once``: one slot per episode (no refills: the batch runs until its longest
  episode ends, every finished slot idling meanwhile);
* ``queued``: fewer slots than episodes, a free slot taking its team's next episode
  right after the step its episode ended.

Each layout runs on two batches of the same episodes:

* ``natural``: the episodes as the policy plays them (the fixture's lengths);
* ``ragged``: the same episodes, each truncated at its own cap drawn log-uniformly from
  ``[16, cap]`` (seeded): lengths spread by design, as policies that end episodes early
  would spread them. Each episode's length must come out as ``min(natural, its cap)``,
  checked for every episode.

Reported per run: slot utilisation (live env-steps / slot-steps), live env-steps/s after
compilation, and the limit at the same slot layout: the Alem step with random legal
actions over the run's slots, and the run's own policy step (the checkpoints' stacked
weights, every slot), each timed alone, added up (``1/(1/env + 1/policy)``). Every timing
is the best of ``--repeats`` alternating runs. ``live/limit`` says how close the evaluator
gets to what its parts cost; ``slot/limit`` the same for every slot-step, live or idle
(the per-step overhead of the loop around the parts).

    .venv/bin/python bench/continuous_batching.py [--cell DIR] [--checkpoints 5]
        [--episodes 20] [--runs 100,25,10] [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import textwrap
import time
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CELL = REPO.parent / "shared" / "fixtures" / "hub" / "full" / "ippo-rnn" / "hard" / "seed1"
PART_STEPS = 64


@contextmanager
def captured_run():
    """Keep the program, start loop and call arguments of the evaluator's next run (the
    loop is copied before the first call donates it)."""
    import jax
    import jax.numpy as jnp

    from alem_eval.evaluate import group

    seen: dict = {}
    drive = group._drive

    def spy(prog, loop, call_args, on_status, on_log=None):
        seen.update(prog=prog, loop=jax.tree_util.tree_map(jnp.copy, loop), args=call_args)
        return drive(prog, loop, call_args, on_status, on_log)

    group._drive = spy
    try:
        yield seen
    finally:
        group._drive = drive


def best_of(fns: dict, repeats: int) -> tuple[dict[str, float], dict]:
    """({name: best wall seconds}, {name: last result}) of ``fns`` (callables), run
    alternately ``repeats`` times after one warm-up call each."""
    import jax

    last = {name: jax.block_until_ready(fn()) for name, fn in fns.items()}
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            last[name] = jax.block_until_ready(fn())
            best[name] = min(best[name], time.perf_counter() - t0)
    return best, last


def part_steps(seen: dict):
    """One step of each part alone over the run's slots -> ``(env_step, policy_step,
    start)``: ``env_step(state, key) -> (state, obs)`` plays random legal actions;
    ``policy_step(params, carry, obs) -> (carry, obs)`` is the run's stacked policy step
    (its actions nudge the observation it returns, so that nothing is dropped as dead
    code); ``start`` holds the run's first slots (``state, variables, carry, obs``)."""
    import jax
    import jax.numpy as jnp

    from alem_eval.evaluate.teams import team_actions

    prog, slots = seen["prog"], seen["loop"].slots
    m = prog.machine
    role_vars, role_mask, dyn = seen["args"][:3]
    env, n = m.env, slots.t.shape[0]

    def env_step(state, key):
        legal = jax.vmap(env.action_mask, (0, None))(state, dyn)
        acts = jax.random.categorical(key, jnp.where(legal, 0.0, -jnp.inf)).astype(jnp.int32)
        out = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(key, n), state, acts, dyn)
        return out.state, out.obs

    def policy_step(params, carry, obs):
        carry, a, _ = team_actions(
            m.policies,
            m.classes,
            params,
            role_mask,
            carry,
            obs,
            slots.dones,
            None,
            episodes=m.slots,
            num_actions=env.statics.num_actions,
        )
        return carry, obs + (a[..., None] == 0).astype(obs.dtype) * 1e-6

    start = dict(state=slots.state, variables=role_vars, carry=slots.policy_carry, obs=slots.obs)
    return env_step, policy_step, start


def part_callables(seen: dict) -> dict:
    """The env alone (random legal actions) and the run's policy step alone, over the
    run's slots, each ``PART_STEPS`` steps in one compiled scan."""
    import jax

    prog = seen["prog"]
    env_step, policy_step, start = part_steps(seen)

    @jax.jit
    def env_alone(state, obs, key):
        def body(carry, kk):
            return env_step(carry[0], kk), None

        (_, obs), _ = jax.lax.scan(body, (state, obs), jax.random.split(key, PART_STEPS))
        return obs.sum()

    @jax.jit
    def policy_alone(variables, carries, obs):
        params = prog._prepare(variables)

        def body(carry, _):
            return policy_step(params, *carry), None

        (_, obs), _ = jax.lax.scan(body, (carries, obs), None, length=PART_STEPS)
        return obs.sum()

    key = jax.random.PRNGKey(0)
    return {
        "env": lambda: env_alone(start["state"], start["obs"], key),
        "policy": lambda: policy_alone(start["variables"], start["carry"], start["obs"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=Path, default=DEFAULT_CELL)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=1024)
    ap.add_argument(
        "--runs", default="100,25,10", help="batch sizes (batch:chunk to set the steps per call)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()

    from alem_eval.evaluate.rollout import run_stack
    from alem_eval.evaluate.settings import CHUNK, slots_per_team
    from alem_eval.model.loader import load_cell
    from alem_eval.core.runtime import enable_compilation_cache

    load_before = os.getloadavg()[0]
    enable_compilation_cache()
    cell = load_cell(args.cell, policy_only=True)
    difficulty = cell.cfg.env.training_difficulty
    k, e = args.checkpoints, args.episodes
    rng = np.random.default_rng(0)
    caps = np.exp(rng.uniform(np.log(16), np.log(args.max_steps), e)).astype(np.int32)
    rows: list[dict] = []
    reference = natural = None
    for spec in args.runs.split(","):
        batch, chunk = (int(x) for x in (spec + f":{CHUNK}").split(":")[:2])
        kw = dict(
            protocol="fast",
            eval_difficulty=difficulty,
            num_episodes=e,
            max_steps=args.max_steps,
            chunk=chunk,
            batch=batch,
        )
        stack = ([cell.cfg] * k, [cell.weights] * k)
        with captured_run() as seen:
            run_stack(*stack, **kw)  # compile
        run_stack(*stack, **kw, episode_caps=caps)  # compile the ragged caps' call
        fns = {
            **part_callables(seen),
            "natural": functools.partial(run_stack, *stack, **kw),
            "ragged": functools.partial(run_stack, *stack, **kw, episode_caps=caps),
        }
        walls, out = best_of(fns, args.repeats)
        reference = reference or out["natural"].records
        natural = np.array([[r["episode_length"] for r in recs] for recs in reference], np.int32)
        n_slots = slots_per_team(k, e, batch) * k
        rate_env = PART_STEPS * n_slots / walls["env"]
        rate_pol = PART_STEPS * n_slots / walls["policy"]
        limit = 1.0 / (1.0 / rate_env + 1.0 / rate_pol)
        for kind, expect in (("natural", natural), ("ragged", np.minimum(natural, caps))):
            res = out[kind]
            lengths = np.array([[r["episode_length"] for r in recs] for recs in res.records])
            same = kind == "ragged" or res.records == reference
            rows.append(
                dict(
                    kind=kind,
                    batch=batch,
                    chunk=chunk,
                    slots=n_slots,
                    live=res.live_steps,
                    slot_steps=res.slot_steps,
                    sps=res.live_steps / walls[kind],
                    slot_sps=res.slot_steps / walls[kind],
                    limit=limit,
                    env=rate_env,
                    policy=rate_pol,
                    ok=bool(np.array_equal(lengths, expect)) and same,
                )
            )
            print(rows[-1], flush=True)
    table = [
        "| episodes | batch (slots) | steps per call | utilisation | live env-steps/s | limit (env, policy) | "
        "live / limit | slot / limit | lengths as expected |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        table.append(
            f"| {r['kind']} | {r['batch']} ({r['slots']}) | {r['chunk']} | "
            f"{r['live'] / r['slot_steps']:.3f} ({r['live']}/{r['slot_steps']}) | "
            f"{r['sps']:.0f} | {r['limit']:.0f} ({r['env']:.0f}, {r['policy']:.0f}) | "
            f"{r['sps'] / r['limit']:.2f} | {r['slot_sps'] / r['limit']:.2f} | "
            f"{'yes' if r['ok'] else 'NO'} |"
        )
    spread = np.minimum(natural, caps)
    text = (
        textwrap.dedent(f"""\
        ## Continuous batching

        Measured by `bench/continuous_batching.py --runs {args.runs}` on {date.today()}:
        `{args.cell.name}` of `{args.cell.parent.parent.parent.name}/{args.cell.parent.parent.name}/{args.cell.parent.name}`,
        {k} copies x {e} episodes on {difficulty}, fast protocol, cap {args.max_steps}.
        Natural episode lengths {natural.min()}-{natural.max()} (mean {natural.mean():.0f});
        ragged: each episode also truncated at its own cap (log-uniform in
        [16, {args.max_steps}], seed 0), lengths {spread.min()}-{spread.max()} (mean
        {spread.mean():.0f}). Machine: {platform.processor() or platform.machine()},
        {os.cpu_count()} cores; load average before the run {load_before:.2f}. Timings: best
        of {args.repeats}, all runs of a layout alternating in one process. The limit is the
        env with random legal actions and the run's policy step (stacked weights), each
        timed alone over the same slots, added up. `alem-eval score`'s default layout
        for this stack on this machine: {slots_per_team(k, e, None) * k} slots.

        """)
        + "\n".join(table)
        + "\n"
    )
    print(text)
    if args.write:
        from benchmarks_md import write_block

        write_block("continuous-batching", text)


if __name__ == "__main__":
    main()
