"""Episodes that run to the cap: the release's cost at trained-policy lengths (the
``--at-cap`` mode of ``bench/synthetic_release.py``; not a test).

What ends an Alem episode (``is_terminal`` of alem's symbolic env): the step count
reaching ``max_timesteps``, every player dead, or the boss defeated. Players die of
hunger, thirst and fatigue (health drains once food, drink or energy reach 0, within a
few hundred steps unless they eat, drink and sleep) and of mobs; the random policies of
the synthetic release die in 73-457 steps. No policy of the release's network shapes
can be made to survive without training, so this mode keeps the agents alive with the
env's own god mode (``EnvParams.god_mode``: health never drops below 9; it also starts
the players with a full inventory and lets them walk through blocks and take ladders
anywhere). Episodes then end only at the evaluator's cap, as a policy that survives
would make them.

Why that measures the cost of long episodes honestly: the evaluator steps every slot as
one vmapped program, where the Alem step's branches are ``select``s (all computed, whatever
the state) and its only loop has a fixed trip count, so the cost of a step does not
depend on what the agents do. :func:`god_mode_check` measures exactly that: the Alem step
alone (random legal actions), with and without god mode, timed in turn.

The god-mode programs are traced in this process only (``ALEM_EVAL_NO_EXPORT``: nothing
is saved for a warm start that a normal run could pick up).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time


def keep_agents_alive() -> None:
    """God mode in every eval env built from now on (call before any is built)."""
    from alem_eval.envs import eval_env

    os.environ["ALEM_EVAL_NO_EXPORT"] = "1"
    if getattr(eval_env.EvalEnv, "_god_mode", False):
        return
    init = eval_env.EvalEnv.__init__

    def god_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._template = self._template.replace(god_mode=True)

    eval_env.EvalEnv.__init__ = god_init  # type: ignore[method-assign]
    eval_env.EvalEnv._god_mode = True  # type: ignore[attr-defined]
    eval_env.get_eval_env.cache_clear()


def god_mode_check(cfg, difficulty: str, *, batch: int, steps: int, repeats: int) -> dict:
    """The Alem step alone (random legal actions, ``batch`` envs vmapped, a ``steps``-step
    scan) with and without god mode, timed in turn ``repeats`` times: best s of each."""
    import jax
    import jax.numpy as jnp

    from alem_eval.envs.eval_env import EvalEnv
    from alem_eval.evaluate.settings import eval_statics, fast_keys

    world = eval_statics(cfg).world
    runs = {}
    for name, god in (("normal", False), ("god mode", True)):
        env = EvalEnv(world)  # its own jitted step: its own trace
        mask_env = EvalEnv(dataclasses.replace(world, action_masking=True))
        for e in (env, mask_env):  # (whatever keep_agents_alive has done)
            e._template = e._template.replace(god_mode=god)
        dyn = env.difficulty_params(difficulty)
        worlds, _ = fast_keys(batch)
        _, state = jax.vmap(env.reset, (0, None))(worlds, dyn)

        def scan(state, key, env=env, mask_env=mask_env, dyn=dyn):
            def one(s, kk):
                k1, k2 = jax.random.split(kk)
                mask = mask_env.action_mask(s, dyn)
                acts = jax.random.categorical(k1, jnp.where(mask, 0.0, -jnp.inf), axis=-1)
                out = env.step(k2, s, acts.astype(jnp.int32), dyn)
                return out.state, out.obs.sum() + out.reward.sum() + out.done

            def body(s, kk):
                s, live = jax.vmap(one)(s, jax.random.split(kk, batch))
                return s, live.sum()

            return jax.lax.scan(body, state, jax.random.split(key, steps))

        runs[name] = (jax.jit(scan), state)
    for fn, state in runs.values():  # compile
        jax.block_until_ready(fn(state, jax.random.PRNGKey(0)))
    best = dict.fromkeys(runs, math.inf)
    for _ in range(repeats):
        for name, (fn, state) in runs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state, jax.random.PRNGKey(1)))
            best[name] = min(best[name], time.perf_counter() - t0)
    return dict(
        batch=batch,
        steps=steps,
        repeats=repeats,
        normal_sps=batch * steps / best["normal"],
        god_sps=batch * steps / best["god mode"],
    )


class _SliceDone(Exception):
    pass


def measure_slice(cfgs, weights, difficulty: str, *, episodes, max_steps, batch, chunks):
    """Start scoring one difficulty's stack as ``score`` does and stop it after
    ``chunks`` compiled calls past the first -> the steady live env-steps/s between the
    first call's report and the last (every slot live: no episode ends before the cap)."""
    import jax

    from alem_eval.evaluate.settings import slots_per_team
    from synthetic_release import release_call

    marks: list[tuple[float, int, int]] = []  # (time, live steps, episodes done)

    def on_progress(p) -> None:
        marks.append((time.perf_counter(), p.live_steps, p.episodes_done))
        if len(marks) > chunks:
            raise _SliceDone

    t0 = time.perf_counter()
    try:
        release_call(cfgs, weights, difficulty, episodes, max_steps, batch, on_progress=on_progress)
        finished = True
    except _SliceDone as stop:
        finished = False
        tb = stop.__traceback__
        while tb is not None:  # the call queued behind the last report: let it finish
            if tb.tb_frame.f_code.co_name == "_drive":
                jax.block_until_ready(tb.tb_frame.f_locals.get("pending"))
            tb = tb.tb_next
        del stop
    (ta, la, _), (tb_, lb, done) = marks[0], marks[-1]
    per_team = slots_per_team(len(cfgs), episodes, batch)
    return dict(
        difficulty=difficulty,
        first_report_s=ta - t0,  # compile (first difficulty), resets, start, one call
        chunk_s=[b[0] - a[0] for a, b in itertools.pairwise(marks)],
        steady_live_sps=(lb - la) / (tb_ - ta),
        live_in_slice=lb - la,
        slots=per_team * len(cfgs),
        slots_per_team=per_team,
        episodes_ended=done,
        finished=finished,
    )


def project(rows: list[dict], *, difficulties: int, cells: int, episodes: int, max_steps: int):
    """The whole release's rollout time at the cap (``cells`` per difficulty), from each
    measured difficulty's steady rate: every slot steps ``max_steps`` times per round of
    episodes, ``ceil(E / slots per team)`` rounds per difficulty (the last round's idle
    slots cost a step like the live ones); a difficulty not measured costs the mean of
    those measured."""
    seconds = slot_steps = 0.0
    for r in rows:
        rounds = math.ceil(episodes / r["slots_per_team"])
        seconds += rounds * max_steps * r["slots"] / r["steady_live_sps"]  # all slots live
        slot_steps += rounds * max_steps * r["slots"]
    scale = difficulties / len(rows)
    live = difficulties * cells * episodes * max_steps
    return dict(
        rollout_s=seconds * scale,
        live_steps=live,
        slot_steps=slot_steps * scale,
        utilisation=live / (slot_steps * scale),
        live_sps=live / (seconds * scale),
        difficulties_measured=len(rows),
    )


def run(args, info: dict, when: dict) -> None:
    """``synthetic_release.py --at-cap``: the god-mode check, then a slice of each
    difficulty's call at the release's layout, and the projection (JSON to ``--json``)."""
    from alem_eval.evaluate.programs import COMPILE_STATS
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.algorithms.train_config import training_run_config
    from cold_call import machine
    from synthetic_release import RELEASED_ENV, synthetic_stack, synthetic_weights

    difficulties = args.difficulties.split(",")
    cfg = training_run_config(
        "ippo-rnn", difficulty=difficulties[0], seed=0, overrides=RELEASED_ENV
    )
    check = god_mode_check(
        cfg, difficulties[0], batch=args.check_batch, steps=args.check_steps, repeats=3
    )
    print(json.dumps(check), flush=True)
    keep_agents_alive()
    t = time.perf_counter()
    weights = synthetic_weights(args.budgets, args.seeds)
    stacks = {d: synthetic_stack(d, weights) for d in difficulties}
    info.update(cells=len(weights) * 3, cells_per_difficulty=len(weights))
    info.update(build_s=time.perf_counter() - t, episodes=args.episodes)
    info.update(max_steps=args.max_steps, chunk=CHUNK, load_before=os.getloadavg()[0])
    info["machine"] = f"{machine()}, jax {info['jax']} ({info['backend']})"
    layout = args.batches.split(",")[0]  # the first layout only
    batch = None if layout == "default" else int(layout)
    rows = []
    for d, (cfgs, ws) in stacks.items():
        n = len(COMPILE_STATS)
        row = measure_slice(
            cfgs,
            ws,
            d,
            episodes=args.episodes,
            max_steps=args.max_steps,
            batch=batch,
            chunks=args.slice_chunks,
        )
        row["compile_s"] = sum(c.trace_s + c.compile_s for c in COMPILE_STATS[n:])
        rows.append(row)
        print(json.dumps(row), flush=True)
    info["load_after"] = os.getloadavg()[0]
    out = dict(
        **when,
        mode="at-cap",
        info=info,
        check=check,
        rows=rows,
        projection=project(
            rows,
            difficulties=3,
            cells=len(weights),
            episodes=args.episodes,
            max_steps=args.max_steps,
        ),
    )
    print(json.dumps(out["projection"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


def render(run: dict) -> str:
    """The BENCHMARKS.md block of an ``--at-cap`` run."""
    info, check, proj = run["info"], run["check"], run["projection"]
    table = [
        "| difficulty | slots (per team) | first report s (compile s) | s per call of "
        f"{info['chunk']} steps | live env-steps/s, every slot live | episodes ended |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in run["rows"]:
        chunks = ", ".join(f"{c:.1f}" for c in r["chunk_s"])
        table.append(
            f"| {r['difficulty']} | {r['slots']} ({r['slots_per_team']}) | "
            f"{r['first_report_s']:.0f} ({r['compile_s']:.0f}) | {chunks} | "
            f"{r['steady_live_sps']:,.0f} | {r['episodes_ended']} |"
        )
    hours = proj["rollout_s"] / 3600
    ratio = check["god_sps"] / check["normal_sps"]
    where = "CPU" if info["backend"] == "cpu" else info["backend"].upper()
    lines = [
        f"## The whole release at the cap ({where}, projected)",
        "",
        f"Measured by `bench/synthetic_release.py --at-cap` on {run['date']} ({run['commit']}) "
        f"on {info['machine']}, load average {info['load_before']:.1f} before and "
        f"{info['load_after']:.1f} after (shared machine). The synthetic release "
        f"({info['cells']} cells, released network sizes, fresh weights; "
        f"{info['episodes']} episodes each, cap {info['max_steps']:,}) with every agent kept "
        "alive by Alem's god mode, so that episodes end only at the cap, as a policy that "
        "survives makes them (random policies die within 73-457 steps of hunger, thirst "
        "and mobs; no untrained policy survives, see `bench/at_cap.py`). Each difficulty's "
        "call is started as `score` makes it (all its cells in one program, the default "
        f"layout of this device: {run['rows'][0]['slots']} slots) and stopped after "
        f"{len(run['rows'][0]['chunk_s'])} compiled calls past the first; the steady rate "
        "is measured between the first call's report and the last.",
        "",
        *table,
        "",
        f"What god mode does to a step's cost: the Alem step alone, "
        f"{check['batch']} envs x {check['steps']} steps, random legal actions, timed in "
        f"turn (best of {check['repeats']}): {check['normal_sps']:,.0f} env-steps/s "
        f"normal, {check['god_sps']:,.0f} in god mode (god/normal {ratio:.2f}).",
        "",
        f"**Projection, not a measurement**: {proj['live_steps']:,.0f} env-steps "
        f"({info['cells']} cells x {info['episodes']} episodes x {info['max_steps']:,} "
        f"steps) at these rates, with every slot stepping {info['max_steps']:,} times per "
        "round of episodes and ceil(episodes / slots per team) rounds per difficulty, "
        f"utilisation {proj['utilisation']:.3f}: **{proj['rollout_s']:,.0f} s "
        f"({hours:.1f} h)** of rollout on this {where}, {proj['live_sps']:,.0f} live "
        "env-steps/s overall, plus the one-off first call (compile, resets) above."
        + (
            ""
            if proj["difficulties_measured"] == 3
            else f" ({proj['difficulties_measured']} difficulties measured; each other "
            "difficulty costs their mean.)"
        ),
    ]
    return "\n".join(lines) + "\n" + run.get("note", "")
