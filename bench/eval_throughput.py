"""Evaluation throughput on one checkpoint cell (not a test).

Measures, at the same batch B = checkpoints x episodes (default 5 x 20 = 100):

  (a) env only: ``step_env`` + action mask with random legal actions, B envs vmapped,
      a jitted ``lax.scan`` of --steps steps;
  (b) the evaluator: ``alem_eval.evaluate.rollout.run_stack(protocol="fast")`` on a stack of
      --checkpoints copies of the cell, --episodes episodes each, capped at --steps
      (end to end, and its rollout program alone);
  (c) an upstream-style loop: a Python loop over one jitted step (mask + policy +
      step_env), host sync every step, one episode at a time;
  (d) the policy forward alone at batch B (a jitted scan of greedy steps);
  (e) the fused limit: the policy forward and the Alem step in ONE ``lax.scan`` over
      the same B envs, no evaluator code (``bench/fused_limit.py``).

Throughput is in env steps per second (one step = all agents of one env act once). The
evaluator should get close to the fused limit (b/e; target >= 0.95) and far above the
upstream loop (b/c; target >= 10 with ``--devices auto``). With several cores a child
process repeats (b), (e) and (c) on one CPU device per core (b'', e'', c''). Every
variant is timed in turn in each of --repeats rounds (best round kept), so a change of
the machine's load hits them all alike; 1 / (1/a + 1/d), the parts simply added up, is
printed too.

    .venv/bin/python bench/eval_throughput.py [--cell DIR] [--steps 128] [--repeats 3] [--write]
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
from fused_limit import fused_rollout, fused_rollout_sharded, interleaved_walls  # noqa: E402

DEFAULT_CELL = REPO.parent / "shared" / "fixtures" / "hub" / "full" / "ippo-rnn" / "hard" / "seed1"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=Path, default=DEFAULT_CELL)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--steps", type=int, default=128, help="steps per episode (cap)")
    ap.add_argument("--upstream-steps", type=int, default=300)
    ap.add_argument("--difficulty", default=None, help="default: the cell's difficulty")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    ap.add_argument(
        "--host-devices",
        type=int,
        default=None,
        help="also time the evaluator, the fused limit and the upstream loop with this "
        "many CPU devices, as `score --devices auto` splits the work (separate process; "
        "default: one per core when there are several, 0 = skip)",
    )
    ap.add_argument(
        "--cli",
        action="store_true",
        help="(b) through `alem-eval score` with its default settings (no --batch: the "
        "default layout) on a local release of --checkpoints copies of the cell, instead "
        "of run_stack with every episode in its own slot",
    )
    ap.add_argument("--evaluator-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.evaluator_only:
        return _evaluator_only(args)

    import jax
    import jax.numpy as jnp

    from alem_eval.model.loader import load_cell
    from alem_eval.core.runtime import enable_compilation_cache

    load_before = os.getloadavg()
    enable_compilation_cache()
    cell = load_cell(args.cell, policy_only=True)
    cfg = cell.cfg
    difficulty = args.difficulty or cfg.env.training_difficulty
    k, e, t = args.checkpoints, args.episodes, args.steps
    b = k * e
    setup = _setup(cell, difficulty, k, e)
    env, dyn, state_b = setup["env"], setup["dyn"], setup["state_b"]
    compiles: dict[str, float] = {}

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

    policy, spec, stacked = setup["policy"], setup["spec"], setup["stacked"]
    obs_in = jax.vmap(env.preprocess)(setup["obs0"])
    mask_in = jnp.ones((e, spec.num_agents, spec.num_actions), bool)

    # (d) policy forward alone ---------------------------------------------------------
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

    # (e) the fused limit: policy + env in one scan, no evaluator code ------------------
    fused = fused_rollout(env, policy, spec.num_agents, dyn, k, e, t, setup["masking"])
    fused_args = (stacked, setup["obs_b"], state_b, setup["keys_b"])

    # (b) the evaluator ------------------------------------------------------------------
    evaluator = (
        _CliRunner(args.cell, k, e, t)
        if args.cli
        else _EvaluatorRunner(cfg, cell.weights, difficulty, k, e, t)
    )

    # (c) upstream-style loop ------------------------------------------------------------
    upstream_loop = _upstream_loop(setup, args.upstream_steps)

    def first(name, fn):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        compiles[name] = time.perf_counter() - t0

    first("a", lambda: env_only(state_b, jax.random.PRNGKey(0)))
    first("d", lambda: policy_only(stacked, obs_in))
    first("e", lambda: fused(*fused_args))
    first("b", evaluator)
    first("c", lambda: upstream_loop(1))
    print("first calls (compile included): " + _fmt(compiles), flush=True)
    walls = interleaved_walls(
        {
            "a": lambda: jax.block_until_ready(env_only(state_b, jax.random.PRNGKey(0))),
            "d": lambda: jax.block_until_ready(policy_only(stacked, obs_in)),
            "e": lambda: jax.block_until_ready(fused(*fused_args)),
            "b": evaluator,
            "c": lambda: upstream_loop(args.upstream_steps),
        },
        args.repeats,
    )
    best = {name: min(w) for name, w in walls.items()}
    ev_best = evaluator.runs[1 + walls["b"].index(best["b"])]  # runs[0]: the first call
    r = {
        "a": b * t / best["a"],
        "d": b * t / best["d"],
        "e": b * t / best["e"],
        "b": ev_best["steps"] / best["b"],
        "b_rollout": ev_best["steps"] / ev_best["timing"]["rollout_s"],
        "b_slot": ev_best["slot_steps"] / best["b"],
        "b_util": ev_best["steps"] / ev_best["slot_steps"],
        "c": upstream_loop.steps / best["c"],
    }
    assert all(run["digest"] == ev_best["digest"] for run in evaluator.runs), (
        "the evaluator is not deterministic"
    )
    for name, label in _labels(args).items():
        if name in r:
            print(f"({name}) {label:60s} {r[name]:9.1f} steps/s", flush=True)
    print(
        f"evaluator: utilisation {r['b_util']:.3f}, slot-steps/s {r['b_slot']:.1f}; split "
        + _fmt(ev_best["timing"]),
        flush=True,
    )

    n_dev = args.host_devices if args.host_devices is not None else (os.cpu_count() or 1)
    if n_dev > 1:
        multi = _run_multi(args, difficulty, n_dev, ev_best["digest"])
        if multi is not None:
            r.update(multi)
            print(
                f"on {n_dev} CPU devices: evaluator {r['b_multi']:.1f}, fused limit "
                f"{r['e_multi']:.1f}, upstream loop {r['c_multi']:.1f} steps/s; records "
                f"identical to 1 device: {r['b_multi_same']}",
                flush=True,
            )
    limit = 1.0 / (1.0 / r["a"] + 1.0 / r["d"])
    ratios = {
        "b/e": r["b"] / r["e"],
        "b'/e": r["b_rollout"] / r["e"],
        "b/c": r["b"] / r["c"],
        "b/limit": r["b"] / limit,
    }
    if "b_multi" in r:
        ratios.update(
            {
                "b''/e''": r["b_multi"] / r["e_multi"],
                "b''/e": r["b_multi"] / r["e"],
                "b''/c''": r["b_multi"] / r["c_multi"],
            }
        )
    print(f"additive limit 1/(1/a+1/d) = {limit:.1f} steps/s")
    print("ratios: " + ", ".join(f"{n} = {v:.2f}" for n, v in ratios.items()))
    if args.write:
        load_after = os.getloadavg()
        _write(
            args, cfg, difficulty, b, r, limit, ratios, ev_best, load_before, load_after, compiles
        )
    return 0


LABELS = {
    "a": "env only: step + mask, random legal actions, B vmapped",
    "d": "policy forward alone at B",
    "e": "fused limit: policy + env step in one scan, no evaluator code",
    "b": "evaluator, run_stack(protocol='fast'), end to end",
    "b_cli": "evaluator through `alem-eval score`, default settings, end to end",
    "b_rollout": "evaluator, its rollout program alone",
    "c": "upstream-style loop (Python loop, jitted step, sync per step, B=1)",
}


def _labels(args) -> dict[str, str]:
    """:data:`LABELS`, (b) named as it ran (``--cli``: through the CLI's defaults)."""
    return {**LABELS, "b": LABELS["b_cli"]} if args.cli else LABELS


def _fmt(d: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in d.items())


def _setup(cell, difficulty: str, k: int, e: int) -> dict:
    """The env, policy and batch of ``k`` copies of the cell x ``e`` episodes (fast worlds)."""
    import jax
    import jax.numpy as jnp

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.group import reset_worlds
    from alem_eval.evaluate.settings import eval_statics, fast_keys
    from alem_eval.model.policies import make_policy

    cfg, spec = cell.cfg, cell.spec
    env = get_eval_env(eval_statics(cfg))
    dyn = env.difficulty_params(difficulty)
    variables = spec.policy_variables(cell.weights)
    worlds, chains = fast_keys(e)
    obs0, state0 = reset_worlds(env.statics.world, dyn, list(worlds))
    tile = lambda x: jnp.concatenate([x] * k)
    obs_b, state_b, keys_b = jax.tree_util.tree_map(tile, (obs0, state0, chains))
    return dict(
        env=env,
        dyn=dyn,
        spec=spec,
        policy=make_policy(spec),
        variables=variables,
        stacked=jax.tree_util.tree_map(lambda x: jnp.stack([jnp.asarray(x)] * k), variables),
        obs0=obs0,
        obs_b=jax.vmap(env.preprocess)(obs_b),
        state_b=state_b,
        keys_b=keys_b,
        masking=cfg.env.action_masking,
    )


class _EvaluatorRunner:
    """``run_stack(protocol="fast")`` on k copies of the cell, every episode in its own
    slot (the parts' batch B); each call's steps, timings and records digest are kept."""

    def __init__(self, cfg, weights, difficulty, k, e, t):
        self.args = ([cfg] * k, [weights] * k)
        self.kw = dict(
            protocol="fast",
            eval_difficulty=difficulty,
            num_episodes=e,
            max_steps=t,
            batch=k * e,
        )
        self.runs: list[dict] = []

    def __call__(self):
        from alem_eval.evaluate.group import LAST_TIMINGS
        from alem_eval.evaluate.rollout import run_stack

        res = run_stack(*self.args, **self.kw)
        self.runs.append(
            dict(
                steps=int(sum(r["episode_length"] for row in res.records for r in row)),
                slot_steps=int(res.slot_steps),
                timing=dict(LAST_TIMINGS),
                digest=_records_digest(res.records),
            )
        )
        return res


class _CliRunner:
    """(b) through ``alem-eval score`` in this process with the CLI's default settings (no
    ``--batch``; ``--devices`` as the process's devices are): ``k`` hard-linked copies of
    the cell as a local release ``bench/<algorithm>/<difficulty>/seed<i>``, ``e`` episodes
    capped at ``t`` steps, a fresh results store every call (nothing is read back)."""

    def __init__(self, cell_dir: Path, k, e, t):
        import atexit
        import json
        import shutil
        import tempfile

        self.tmp = Path(tempfile.mkdtemp(prefix="alem-throughput-"))
        atexit.register(shutil.rmtree, self.tmp, ignore_errors=True)
        data = json.loads((cell_dir / "config.json").read_text())
        algorithm, difficulty = cell_dir.parts[-3], cell_dir.parts[-2]
        for i in range(k):
            dst = self.tmp / "release" / "bench" / algorithm / difficulty / f"seed{i}"
            shutil.copytree(cell_dir / "checkpoint", dst / "checkpoint", copy_function=os.link)
            if isinstance(data.get("config"), dict):
                data["config"]["SEED"] = i
            (dst / "config.json").write_text(json.dumps(data))
        self.argv = ["score", "bench", "--source", str(self.tmp / "release")]
        self.argv += ["--episodes", str(e), "--max-steps", str(t), "--format", "json"]
        self.runs: list[dict] = []

    def __call__(self):
        import contextlib
        import io
        import json

        from alem_eval.cli.app import main as cli_main
        from alem_eval.evaluate import group, rollout

        results = self.tmp / f"results{len(self.runs)}"
        split = {"slot_steps": 0, "timing": {}}
        run_group = group.run_group

        def counted(*a, **kw):
            out = run_group(*a, **kw)
            split["slot_steps"] += out[2]
            for key, v in group.LAST_TIMINGS.items():
                split["timing"][key] = split["timing"].get(key, 0.0) + v
            return out

        rollout.run_group = counted  # type: ignore[assignment]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                cli_main([*self.argv, "--results", str(results)])
        finally:
            rollout.run_group = run_group  # type: ignore[assignment]
        records = [[dict(ep) for ep in r["episodes"]] for r in json.loads(out.getvalue())]
        self.runs.append(
            dict(
                steps=int(sum(ep["episode_length"] for row in records for ep in row)),
                slot_steps=int(split["slot_steps"]),
                timing=split["timing"],
                digest=_records_digest(records),
            )
        )


def _upstream_loop(setup: dict, default_steps: int):
    """(c): upstream's evaluation shape: one jitted step (mask + policy + env), a Python
    loop over it with a host sync every step, one episode at a time."""
    import jax
    import jax.numpy as jnp

    env, dyn, spec, policy = setup["env"], setup["dyn"], setup["spec"], setup["policy"]
    pparams = policy.prepare(jax.tree_util.tree_map(jnp.asarray, setup["variables"]))

    @jax.jit
    def up_step(state, obs, carry, dones, key):
        key, _act_key, env_key = jax.random.split(key, 3)
        mask = env.action_mask(state, dyn)
        carry, acts = policy.act(pparams, carry, obs, dones, mask)
        out = env.step(env_key, state, acts, dyn)
        return out.state, out.obs, carry, out.agent_dones, out.done, jnp.mean(out.reward), key

    def loop(n_steps=default_steps):
        key = jax.random.PRNGKey(0)
        done_steps, ep = 0, 0
        while done_steps < n_steps:
            raw, state = env.reset(jax.random.PRNGKey(9999 + ep), dyn)
            obs, carry = env.preprocess(raw), policy.init_carry()
            dones = jnp.zeros(spec.num_agents, bool)
            ret = 0.0
            while done_steps < n_steps:
                state, obs, carry, dones, done, rew, key = up_step(state, obs, carry, dones, key)
                ret += float(rew)
                done_steps += 1
                if bool(done):
                    break
            ep += 1
        loop.steps = done_steps
        return done_steps

    return loop


def _run_multi(args, difficulty: str, n_dev: int, digest: str) -> dict | None:
    """The evaluator, the fused limit and the upstream loop on ``n_dev`` CPU devices, in a
    child process (JAX's device count is fixed when its backends start)."""
    import json
    import subprocess

    cmd = [sys.executable, __file__, "--evaluator-only", "--host-devices", str(n_dev)]
    cmd += ["--cell", str(args.cell), "--checkpoints", str(args.checkpoints)]
    cmd += ["--episodes", str(args.episodes), "--steps", str(args.steps)]
    cmd += ["--difficulty", difficulty, "--repeats", str(args.repeats)]
    cmd += ["--upstream-steps", str(args.upstream_steps), *(["--cli"] if args.cli else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("EVALUATOR ")]
    if proc.returncode != 0 or not line:
        print("multi-device run failed:\n" + proc.stderr[-2000:], flush=True)
        return None
    multi = json.loads(line[-1][len("EVALUATOR ") :])
    return dict(
        b_multi=multi["b"],
        b_multi_rollout=multi["b_rollout"],
        e_multi=multi["e"],
        c_multi=multi["c"],
        b_multi_devices=n_dev,
        b_multi_same=multi["records"] == digest,
    )


def _records_digest(records) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def _evaluator_only(args) -> int:
    """Child process: on ``--host-devices`` CPU devices, the evaluator, the fused limit
    split the same way and the upstream loop, interleaved (one JSON line)."""
    import json

    from alem_eval.core.runtime import use_host_devices

    use_host_devices(args.host_devices)
    import jax

    from alem_eval.model.loader import load_cell
    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()
    n_dev = args.host_devices
    assert jax.local_device_count() == n_dev, jax.devices()
    cell = load_cell(args.cell, policy_only=True)
    k, e, t = args.checkpoints, args.episodes, args.steps
    setup = _setup(cell, args.difficulty, k, e)
    fused = fused_rollout_sharded(
        setup["env"],
        setup["policy"],
        setup["spec"].num_agents,
        setup["dyn"],
        k,
        e,
        t,
        setup["masking"],
        n_dev,
    )
    fused_args = (setup["stacked"], setup["obs_b"], setup["state_b"], setup["keys_b"])
    evaluator = (
        _CliRunner(args.cell, k, e, t)
        if args.cli
        else _EvaluatorRunner(cell.cfg, cell.weights, args.difficulty, k, e, t)
    )
    upstream_loop = _upstream_loop(setup, args.upstream_steps)
    jax.block_until_ready(fused(*fused_args))
    evaluator()
    upstream_loop(1)
    walls = interleaved_walls(
        {
            "e": lambda: jax.block_until_ready(fused(*fused_args)),
            "b": evaluator,
            "c": lambda: upstream_loop(args.upstream_steps),
        },
        args.repeats,
    )
    best = {name: min(w) for name, w in walls.items()}
    ev_best = evaluator.runs[1 + walls["b"].index(best["b"])]
    out = {
        "b": ev_best["steps"] / best["b"],
        "b_rollout": ev_best["steps"] / ev_best["timing"]["rollout_s"],
        "e": k * e * t / best["e"],
        "c": upstream_loop.steps / best["c"],
        "records": ev_best["digest"],
    }
    print("EVALUATOR " + json.dumps(out))
    return 0


def _machine() -> str:
    import jax

    from benchmarks_md import cpu_model

    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return (
        f"{cpu_model()}{mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, jax {jax.__version__} "
        f"({jax.default_backend()}, {jax.local_device_count()} device(s))"
    )


def _write(args, cfg, difficulty, b, r, limit, ratios, ev_best, load_before, load_after, compiles):
    from synthetic_release import commit

    try:
        cell_name = str(
            args.cell.resolve().relative_to(REPO.parent / "shared" / "fixtures" / "hub")
        )
    except ValueError:
        cell_name = str(args.cell)
    labels = _labels(args)
    rows = [f"| ({n}) {labels[n]} | {r[n]:.1f} |" for n in ("a", "d", "e")]
    rows.append(f"| additive limit 1/(1/a + 1/d) | {limit:.1f} |")
    rows += [f"| ({n}) {labels[n]} | {r[n]:.1f} |" for n in ("b", "b_rollout", "c")]
    multi = ""
    if "b_multi" in r:
        n_dev = r["b_multi_devices"]
        same = "identical" if r["b_multi_same"] else "NOT identical"
        rows += [
            f"| (e'') fused limit on {n_dev} CPU devices (`jax.pmap` over the episodes) | "
            f"{r['e_multi']:.1f} |",
            f"| (b'') evaluator on {n_dev} CPU devices (`score --devices auto`; records "
            f"{same} to 1 device), end to end | {r['b_multi']:.1f} |",
            f"| (c'') upstream-style loop, in the {n_dev}-device process | {r['c_multi']:.1f} |",
        ]
        bc2, be2, be1 = ratios["b''/c''"], ratios["b''/e''"], ratios["b''/e"]
        multi = (
            f" With {n_dev} devices: **b''/c'' = {bc2:.1f}** (target >= 10: "
            f"{'met' if bc2 >= 10 else 'not met'}), b''/e'' = {be2:.2f} (the evaluator "
            f"against the fused limit on as many devices), b''/e = {be1:.2f} (against one "
            "device's)."
        )
    met = "met" if ratios["b/e"] >= 0.95 else "not met"
    body = f"""## Evaluation throughput

Measured by `bench/eval_throughput.py --write` on {datetime.date.today().isoformat()}
({commit()}). Cell `{cell_name}` ({cfg.algorithm}, FC {cfg.network.fc_dim}, GRU
{cfg.network.gru_hidden}), difficulty `{difficulty}`; batch B = {args.checkpoints}
checkpoints x {args.episodes} episodes = {b}; {args.steps} steps per episode (cap);
upstream-style loop {args.upstream_steps} steps. Machine: {_machine()}. Load average
{load_before[0]:.1f} before the run and {load_after[0]:.1f} after (the machine is shared:
absolute numbers are noisy, so every variant is timed in turn in each of {args.repeats}
rounds, in one process, and its best round is kept; the ratios compare numbers of the same
run). Throughput in env steps/s (one step = all agents of one env act once).

| measurement | steps/s |
|---|---:|
{chr(10).join(rows)}

The fused limit (e) is the policy forward and the Alem step in one `lax.scan` over the
same B envs, with no evaluator code (no done handling, output buffer, refill or host
round trip): what the evaluator's rollout costs at best. The evaluator (b) counts live
steps: its utilisation here is {r["b_util"]:.3f} (episodes that end before the cap leave
their slot idle; {r["b_slot"]:.1f} slot-steps/s).

Ratios: **b/e = {ratios["b/e"]:.2f}** (target >= 0.95 of the fused limit on one device:
{met}; its rollout program alone {ratios["b'/e"]:.2f}), **b/c = {ratios["b/c"]:.1f}**
on one device, b/(additive limit) = {ratios["b/limit"]:.2f}.{multi}

Where the evaluator's best end-to-end time goes (s): {_fmt(ev_best["timing"])}. First
calls (compile included, s): {_fmt(compiles)}.
"""
    from benchmarks_md import write_block

    write_block("eval-throughput", body)
    print("wrote BENCHMARKS.md (eval-throughput)")


if __name__ == "__main__":
    raise SystemExit(main())
