"""Evaluation throughput on one checkpoint cell (not a test).

Measures, at the same batch B = checkpoints x episodes (default 5 x 20 = 100):

  (a) env only: ``step_env`` + action mask with random legal actions, B envs vmapped,
      a jitted ``lax.scan`` of --steps steps;
  (b) the evaluator: ``alem_eval.evaluate.run_stack(protocol="fast")`` on a stack of
      --checkpoints copies of the cell, --episodes episodes each, capped at --steps
      (end to end, and its rollout program alone);
  (c) an upstream-style loop: a Python loop over one jitted step (mask + policy +
      step_env), host sync every step, one episode at a time;
  (d) the policy forward alone at batch B (a jitted scan of greedy steps).

Throughput is in env steps per second (one step = all agents of one env act once).
limit = 1 / (1/a + 1/d) is what env + policy cost when simply added up; the evaluator
should get close to it (b/limit) and far above the upstream loop (b/c).

    .venv/bin/python bench/eval_throughput.py [--cell DIR] [--steps 128] [--write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_CELL = REPO.parent / "shared" / "fixtures" / "hub" / "full" / "ippo-rnn" / "hard" / "seed1"


def _timed(fn, repeats: int = 1) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs (after one warm-up run)."""
    import jax

    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=Path, default=DEFAULT_CELL)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--steps", type=int, default=128, help="steps per episode (cap)")
    ap.add_argument("--upstream-steps", type=int, default=300)
    ap.add_argument("--difficulty", default=None, help="default: the cell's difficulty")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    ap.add_argument(
        "--host-devices",
        type=int,
        default=None,
        help="also time the evaluator alone with this many CPU devices (separate "
        "process; default: one per core when there are several, 0 = skip)",
    )
    ap.add_argument("--evaluator-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.evaluator_only:
        return _evaluator_only(args)

    import jax
    import jax.numpy as jnp

    from alem_env.eval_env import get_eval_env
    from alem_eval import evaluate as ev
    from alem_eval.loader import load_cell
    from alem_eval.policies import make_policy
    from alem_eval.runtime import enable_compilation_cache

    load_before = os.getloadavg()
    enable_compilation_cache()
    cell = load_cell(args.cell, policy_only=True)
    cfg, spec = cell.cfg, cell.spec
    difficulty = args.difficulty or cfg.env.training_difficulty
    k, e, t = args.checkpoints, args.episodes, args.steps
    b = k * e
    env = get_eval_env(ev.eval_statics(cfg))
    policy = make_policy(spec)
    dyn = env.difficulty_params(difficulty)
    variables = spec.policy_variables(cell.weights)
    worlds, _ = ev.fast_keys(e)
    obs0, state0 = ev._resets(env.statics.world, dyn, list(worlds))
    tile = lambda x: jnp.concatenate([x] * k)
    _, state_b = jax.tree_util.tree_map(tile, (obs0, state0))
    results = {}

    # (a) env only ------------------------------------------------------------------
    @jax.jit
    def env_only(state, key):
        def one(s, kk):
            k1, k2 = jax.random.split(kk)
            mask = env.action_mask(s, dyn)
            acts = jax.random.categorical(k1, jnp.where(mask, 0.0, -jnp.inf))
            out = env.step(k2, s, acts.astype(jnp.int32), dyn)
            return out.state, out.obs.sum() + out.reward.sum()

        def body(s, kk):
            s, live = jax.vmap(one)(s, jax.random.split(kk, b))
            return s, live.sum()

        # the whole state and every observation stay live: nothing can be optimised away
        s, sums = jax.lax.scan(body, state, jax.random.split(key, t))
        return s, sums

    t0 = time.perf_counter()
    env_only.lower(state_b, jax.random.PRNGKey(0)).compile()
    compile_a = time.perf_counter() - t0
    wall = _timed(lambda: env_only(state_b, jax.random.PRNGKey(0)), args.repeats)
    results["a"] = b * t / wall
    print(
        f"(a) env only          B={b:4d}: {results['a']:9.1f} steps/s "
        f"({wall:.2f} s for {t} steps; compile {compile_a:.0f} s)",
        flush=True,
    )

    # (d) policy forward alone ---------------------------------------------------------
    stacked = jax.tree_util.tree_map(lambda x: jnp.stack([jnp.asarray(x)] * k), variables)
    obs_in = jax.vmap(env.preprocess)(obs0)
    mask_in = jnp.ones((e, spec.num_agents, spec.num_actions), bool)

    @jax.jit
    def policy_only(stacked, obs):
        params = jax.vmap(policy.prepare)(stacked)

        def per_ckpt(p):
            def body(carry, _):
                c, o = carry
                c, acts = jax.vmap(
                    lambda cc, oo, m: policy.act(p, cc, oo, jnp.zeros(spec.num_agents, bool), m)
                )(c, o, mask_in)
                # feed something action-dependent back so steps cannot be hoisted
                o = o + (acts[..., None] == 0).astype(o.dtype) * 1e-6
                return (c, o), None

            carry0 = jax.vmap(lambda _: policy.init_carry())(jnp.arange(e))
            (_, o), _ = jax.lax.scan(body, (carry0, obs), None, length=t)
            return o.sum()

        return jax.vmap(per_ckpt)(params)

    t0 = time.perf_counter()
    policy_only.lower(stacked, obs_in).compile()
    compile_d = time.perf_counter() - t0
    wall = _timed(lambda: policy_only(stacked, obs_in), args.repeats)
    results["d"] = b * t / wall
    print(
        f"(d) policy forward    B={b:4d}: {results['d']:9.1f} steps/s "
        f"({wall:.2f} s; compile {compile_d:.0f} s)",
        flush=True,
    )

    # (b) the evaluator ------------------------------------------------------------------
    ev_res = _time_evaluator(cfg, cell.weights, difficulty, k, e, t, args.repeats)
    results["b"], results["b_rollout"] = ev_res["b"], ev_res["b_rollout"]
    best_timing, first_wall, compile_b = ev_res["timing"], ev_res["first_wall"], ev_res["compile"]
    print(
        f"(b) evaluator         B={b:4d}: {results['b']:9.1f} steps/s end to end "
        f"({ev_res['wall']:.2f} s for {ev_res['steps']} effective steps; first call "
        f"{first_wall:.0f} s), rollout program alone {results['b_rollout']:.1f} steps/s; "
        "split " + ", ".join(f"{kk} {vv:.2f}" for kk, vv in best_timing.items()),
        flush=True,
    )

    # (c) upstream-style loop ------------------------------------------------------------
    pparams = policy.prepare(jax.tree_util.tree_map(jnp.asarray, variables))

    @jax.jit
    def up_step(state, obs, carry, dones, key):
        key, _act_key, env_key = jax.random.split(key, 3)
        mask = env.action_mask(state, dyn)
        carry, acts = policy.act(pparams, carry, obs, dones, mask)
        out = env.step(env_key, state, acts, dyn)
        return out.state, out.obs, carry, out.agent_dones, out.done, jnp.mean(out.reward), key

    def upstream_loop(n_steps):
        key = jax.random.PRNGKey(0)
        done_steps, ep = 0, 0
        while done_steps < n_steps:
            raw, state = env.reset(jax.random.PRNGKey(9999 + ep), dyn)
            obs, carry = env.preprocess(raw), policy.init_carry()
            dones = jnp.zeros(spec.num_agents, bool)
            ret = 0.0
            while done_steps < n_steps:
                state, obs, carry, dones, done, r, key = up_step(state, obs, carry, dones, key)
                ret += float(r)
                done_steps += 1
                if bool(done):
                    break
            ep += 1
        return done_steps

    t0 = time.perf_counter()
    upstream_loop(1)
    compile_c = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = upstream_loop(args.upstream_steps)
    wall = time.perf_counter() - t0
    results["c"] = n / wall
    print(
        f"(c) upstream-style loop B=1: {results['c']:9.1f} steps/s "
        f"({wall:.2f} s for {n} steps; compile {compile_c:.0f} s)",
        flush=True,
    )

    n_dev = args.host_devices if args.host_devices is not None else (os.cpu_count() or 1)
    if n_dev > 1:
        import json
        import subprocess

        cmd = [
            sys.executable,
            __file__,
            "--evaluator-only",
            "--host-devices",
            str(n_dev),
            "--cell",
            str(args.cell),
            "--checkpoints",
            str(k),
            "--episodes",
            str(e),
            "--steps",
            str(t),
            "--difficulty",
            difficulty,
            "--repeats",
            str(args.repeats),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("EVALUATOR ")]
        if proc.returncode == 0 and line:
            multi = json.loads(line[-1][len("EVALUATOR ") :])
            results["b_multi"], results["b_multi_devices"] = multi["b"], n_dev
            results["b_multi_same"] = multi["records"] == _records_digest(ev_res["records"])
            print(
                f"(b) evaluator on {n_dev} CPU devices: {multi['b']:9.1f} steps/s end to end "
                f"(rollout alone {multi['b_rollout']:.1f}); records identical to 1 device: "
                f"{results['b_multi_same']}",
                flush=True,
            )
        else:
            print("multi-device evaluator run failed:\n" + proc.stderr[-2000:], flush=True)

    limit = 1.0 / (1.0 / results["a"] + 1.0 / results["d"])
    bc, bl = results["b"] / results["c"], results["b"] / limit
    blr = results["b_rollout"] / limit
    print(f"limit = 1/(1/a+1/d) = {limit:.1f} steps/s")
    print(
        f"b/c = {bc:.1f} (target >= 10)   b/limit = {bl:.2f} (rollout alone {blr:.2f}; "
        f"target >= 0.85)"
    )

    if args.write:
        _write(
            args,
            cfg,
            difficulty,
            b,
            results,
            limit,
            bc,
            bl,
            blr,
            best_timing,
            load_before,
            compile_a,
            compile_d,
            compile_b,
            compile_c,
            first_wall,
        )
    return 0


def _time_evaluator(cfg, weights, difficulty, k, e, t, repeats) -> dict:
    """Best-of-``repeats`` end-to-end and rollout-only throughput of the fast protocol."""
    from alem_eval import evaluate as ev

    cfgs, ws = [cfg] * k, [weights] * k
    run = lambda: ev.run_stack(  # every episode in its own slot: the parts' batch B
        cfgs,
        ws,
        protocol="fast",
        eval_difficulty=difficulty,
        num_episodes=e,
        max_steps=t,
        batch=k * e,
    )
    t0 = time.perf_counter()
    first = run()
    first_wall = time.perf_counter() - t0
    best, timing = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = run()
        wall = time.perf_counter() - t0
        if wall < best:
            best, timing = wall, dict(ev.LAST_TIMINGS)
    assert res.records == first.records, "the evaluator is not deterministic"
    steps = int(sum(r["episode_length"] for row in res.records for r in row))
    return dict(
        b=steps / best,
        b_rollout=steps / timing["rollout_s"],
        wall=best,
        steps=steps,
        timing=timing,
        first_wall=first_wall,
        records=res.records,
        compile=sum(c.compile_s + c.trace_s for c in ev.COMPILE_STATS),
    )


def _records_digest(records) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def _evaluator_only(args) -> int:
    """Child process: the evaluator alone on ``--host-devices`` CPU devices (JSON line)."""
    import json

    from alem_eval.runtime import use_host_devices

    use_host_devices(args.host_devices)
    import jax

    from alem_eval.runtime import enable_compilation_cache
    from alem_eval.loader import load_cell

    enable_compilation_cache()
    assert jax.local_device_count() == args.host_devices, jax.devices()
    cell = load_cell(args.cell, policy_only=True)
    r = _time_evaluator(
        cell.cfg,
        cell.weights,
        args.difficulty,
        args.checkpoints,
        args.episodes,
        args.steps,
        args.repeats,
    )
    print(
        "EVALUATOR "
        + json.dumps(
            {"b": r["b"], "b_rollout": r["b_rollout"], "records": _records_digest(r["records"])}
        )
    )
    return 0


def _machine() -> str:
    import jax

    cpu = "unknown CPU"
    try:
        m = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, jax {jax.__version__} "
        f"({jax.default_backend()}, {jax.local_device_count()} device(s))"
    )


def _write(
    args,
    cfg,
    difficulty,
    b,
    r,
    limit,
    bc,
    bl,
    blr,
    timing,
    load_before,
    compile_a,
    compile_d,
    compile_b,
    compile_c,
    first_wall,
) -> None:
    try:
        cell_name = str(
            args.cell.resolve().relative_to(REPO.parent / "shared" / "fixtures" / "hub")
        )
    except ValueError:
        cell_name = str(args.cell)
    multi_row = ""
    if "b_multi" in r:
        same = "identical" if r["b_multi_same"] else "NOT identical"
        multi_row = (
            f"| (b'') evaluator on {r['b_multi_devices']} CPU devices "
            f"(`use_host_devices()`; records {same} to 1 device) | "
            f"{r['b_multi']:.1f} |\n"
        )
    body = f"""## Evaluation throughput

Measured by `bench/eval_throughput.py --write` on {datetime.date.today().isoformat()}.
Cell `{cell_name}` ({cfg.algorithm}, FC {cfg.network.fc_dim}, GRU {cfg.network.gru_hidden}),
difficulty `{difficulty}`; batch B = {args.checkpoints} checkpoints x {args.episodes} episodes
= {b}; {args.steps} steps per episode (cap); upstream-style loop {args.upstream_steps} steps.
Machine: {_machine()}. Load average before the run: {load_before[0]:.2f} (the machine is
shared, so absolute numbers are noisy). Throughput in env steps/s (one step = all 3 agents).

| measurement | steps/s |
|---|---:|
| (a) env only: `step_env` + mask, random legal actions, B vmapped | {r["a"]:.1f} |
| (d) policy forward alone at B | {r["d"]:.1f} |
| limit = 1/(1/a + 1/d) | {limit:.1f} |
| (b) evaluator, `run_stack(protocol="fast")`, end to end | {r["b"]:.1f} |
| (b') evaluator, its rollout program alone | {r["b_rollout"]:.1f} |
| (c) upstream-style loop (Python loop, jitted step, host sync per step, B=1) | {r["c"]:.1f} |
{multi_row}
Ratios: **b/c = {bc:.1f}** (target >= 10), **b/limit = {bl:.2f}** (rollout alone {blr:.2f};
target >= 0.85).

Where the evaluator's end-to-end time goes (s): {", ".join(f"{k} {v:.2f}" for k, v in timing.items())}.
One-off costs (not in the numbers above): compile (a) {compile_a:.0f} s, (d) {compile_d:.0f} s,
(c) {compile_c:.0f} s; the evaluator's trace + compile {compile_b:.0f} s (first call
{first_wall:.0f} s in all). With `enable_compilation_cache()` a later process skips the
XLA compile (the Python trace of the Alem step, ~5-20 s, remains).
"""
    from benchmarks_md import write_block

    write_block("eval-throughput", body)
    print("wrote BENCHMARKS.md (eval-throughput)")


if __name__ == "__main__":
    raise SystemExit(main())
