"""Benchmark: slot utilisation and live throughput of continuous batching (not a test).

A batch of ``K`` copies of a checkpoint x ``E`` episodes (ragged episode lengths) is scored
with the fast protocol at several batch sizes / chunk lengths, all in one process:

* ``all at once``: one slot per episode (no refills: the batch runs until its longest
  episode ends, every finished slot idling meanwhile);
* ``queued``: fewer slots than episodes, each team's slots refilled from its queue at
  every chunk boundary.

Reported per run: slot utilisation (live env-steps / slot-steps), live env-steps/s after
compilation, and the env + policy limit at the same batch size (``1/(1/a + 1/d)``: the
Alem step with random legal actions, and the policy forward, each timed alone at that
batch), so ``live/limit`` says how close the evaluator gets to what its parts cost.

    .venv/bin/python bench/continuous_batching.py [--cell DIR] [--checkpoints 5]
        [--episodes 20] [--runs 100:64,25:16,25:64] [--write]
"""

from __future__ import annotations

import argparse
import os
import platform
import textwrap
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CELL = REPO.parent / "shared" / "fixtures" / "hub" / "full" / "ippo-rnn" / "hard" / "seed1"


def limit_at(cell, difficulty: str, batch: int, steps: int = 64) -> float:
    """1 / (1/a + 1/d) env-steps/s at ``batch``: the env and the policy timed alone."""
    import jax
    import jax.numpy as jnp

    from alem_env.eval_env import get_eval_env
    from alem_eval import evaluate as ev
    from alem_eval.policies import make_policy

    cfg, spec = cell.cfg, cell.spec
    env = get_eval_env(ev.eval_statics(cfg))
    policy = make_policy(spec)
    dyn = env.difficulty_params(difficulty)
    worlds, _ = ev.fast_keys(batch)
    obs0, state0 = ev._resets(env.statics.world, dyn, list(worlds))

    @jax.jit
    def env_only(state, key):
        def one(s, kk):
            k1, k2 = jax.random.split(kk)
            acts = jax.random.categorical(k1, jnp.where(env.action_mask(s, dyn), 0.0, -jnp.inf))
            out = env.step(k2, s, acts.astype(jnp.int32), dyn)
            return out.state, out.obs.sum() + out.reward.sum()

        def body(s, kk):
            s, live = jax.vmap(one)(s, jax.random.split(kk, batch))
            return s, live.sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))

    params = policy.prepare(
        jax.tree_util.tree_map(jnp.asarray, spec.policy_variables(cell.weights))
    )
    obs_in = jax.vmap(env.preprocess)(obs0)
    mask = jnp.ones((batch, spec.num_agents, spec.num_actions), bool)

    @jax.jit
    def policy_only(obs):
        def body(carry, _):
            c, o = carry
            c, acts = jax.vmap(
                lambda cc, oo, m: policy.act(params, cc, oo, jnp.zeros(spec.num_agents, bool), m)
            )(c, o, mask)
            return (c, o + (acts[..., None] == 0).astype(o.dtype) * 1e-6), None

        carry0 = jax.vmap(lambda _: policy.init_carry())(jnp.arange(batch))
        (_, o), _ = jax.lax.scan(body, (carry0, obs), None, length=steps)
        return o.sum()

    def timed(fn, *a):
        jax.block_until_ready(fn(*a))  # compile + warm
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*a))
        return time.perf_counter() - t0

    a = batch * steps / timed(env_only, state0, jax.random.PRNGKey(0))
    d = batch * steps / timed(policy_only, obs_in)
    return 1.0 / (1.0 / a + 1.0 / d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=Path, default=DEFAULT_CELL)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=1024)
    ap.add_argument("--runs", default="100:64,25:16,25:64", help="batch:chunk,...")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()

    from alem_eval import evaluate as ev
    from alem_eval.loader import load_cell
    from alem_eval.runtime import enable_compilation_cache

    load_before = os.getloadavg()[0]
    enable_compilation_cache()
    cell = load_cell(args.cell, policy_only=True)
    difficulty = cell.cfg.env.training_difficulty
    k, e = args.checkpoints, args.episodes
    rows, reference = [], None
    for spec in args.runs.split(","):
        batch, chunk = (int(x) for x in spec.split(":"))
        kw = dict(
            protocol="fast",
            eval_difficulty=difficulty,
            num_episodes=e,
            max_steps=args.max_steps,
            chunk=chunk,
            batch=batch,
        )
        ev.run_stack([cell.cfg] * k, [cell.weights] * k, **kw)  # compile
        t0 = time.perf_counter()
        res = ev.run_stack([cell.cfg] * k, [cell.weights] * k, **kw)
        wall = time.perf_counter() - t0
        slots = ev.slots_per_team(k, e, batch) * k
        limit = limit_at(cell, difficulty, slots)
        reference = reference or res.records
        same = res.records == reference
        rows.append(
            (
                batch,
                chunk,
                slots,
                res.utilisation,
                res.live_steps / wall,
                limit,
                res.live_steps,
                res.slot_steps,
                same,
            )
        )
        print(rows[-1], flush=True)
    lengths = [r["episode_length"] for recs in res.records for r in recs]
    table = [
        "| batch (slots) | chunk | utilisation | live env-steps/s | limit at that batch | "
        "live / limit | records = first row |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for batch, chunk, slots, util, sps, limit, live, slot_steps, same in rows:
        table.append(
            f"| {batch} ({slots}) | {chunk} | {util:.3f} ({live}/{slot_steps}) | "
            f"{sps:.0f} | {limit:.0f} | {sps / limit:.2f} | {'yes' if same else 'NO'} |"
        )
    text = (
        textwrap.dedent(f"""\
        ## Continuous batching

        Measured by `bench/continuous_batching.py` on {date.today()}: `{args.cell.name}` of
        `{args.cell.parent.parent.parent.name}/{args.cell.parent.parent.name}/{args.cell.parent.name}`,
        {k} copies x {e} episodes on {difficulty}, fast protocol, cap {args.max_steps};
        episode lengths {min(lengths):.0f}-{max(lengths):.0f} (mean {sum(lengths) / len(lengths):.0f}).
        Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load
        average before the run {load_before:.2f}. Slot-steps count every step a batch slot
        ran, live or idle; the limit is the env with random legal actions and the policy
        forward, each timed alone at the same batch, added up.

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
