"""Shared helpers of the evaluator tests (tests/test_evaluate*.py).

Compiling the Alem step dominates these tests (about a minute per program on a loaded
2-core CPU), so the test modules share the evaluator's module-level program cache and load
each fixture cell once per session. conftest.py points JAX's persistent compilation cache
at a per-session directory; set ``ALEM_EVAL_JAX_CACHE`` to a lasting directory to keep
compiled programs between runs (a warm rerun skips all XLA compiles).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from tests.conftest import FIXTURES

# Group markers of the in-process evaluator tests: under pytest-xdist (``--dist loadgroup``)
# a group runs in one worker, so its tests share that worker's compiled programs
# (module-level caches). Two groups, so both workers compile: the reference-protocol
# parity tests (their own programs: one slot per checkpoint, upstream's caps) and the rest.
EVALUATOR_GROUP = "evaluator"
REFERENCE_GROUP = "evaluator-reference"
# The cross-play CLI tests and `alem-eval demo` at the notebook's settings, then
# notebooks/quickstart.ipynb, which scores and pairs the same demo cells the same way: its
# kernel loads those programs from the compilation cache.
DEMO_PROGRAMS = "demo-programs"
# The fast-protocol batch used by the in-process and the CLI tests alike (one checkpoint,
# this many episodes, a step cap <= 1024): equal shapes give one program, which the
# persistent compilation cache then serves to every process of the test run.
FAST_EPISODES = 4
# IPPO beside PQN, each in self-play with 2 slots for its FAST_EPISODES episodes, one step
# per call: the queue of tests/test_continuous_batching.py, also test_teams' self-play
# reference for PQN (one program for both).
PAIR_CELLS = ("tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0")
PAIR_TEAMS = [(0, 0, 0), (1, 1, 1)]
PAIR_BATCH = dict(batch=4, chunk=1)
# The mixed batch of tests/test_teams.py and tests/test_recording.py: every algorithm, five
# checkpoints, seven teams of two slots each (so each team's four episodes queue), on
# 'easy' with a short cap. Recording it unrecorded is test_teams' program.
MIXED_CELLS = (
    "tiny/ippo-rnn/easy/seed0",
    "tiny/mappo-rnn/medium/seed0",
    "tiny/hypermarl-rnn/hard/seed0",
    "tiny/pqn-vdn-rnn/easy/seed0",
    "tiny/ippo-rnn/hard/seed2",
)
MIXED_TEAMS = [(0, 0, 0), (0, 1, 2), (3, 0, 1), (2, 3, 3), (0, 0, 4), (4, 0, 0), (3, 3, 3)]
MIXED_RUN = dict(
    protocol="fast",
    eval_difficulty="easy",
    num_episodes=FAST_EPISODES,
    max_steps=40,  # short: these tests check composition, not play
    batch=2 * len(MIXED_TEAMS),
)

# The reference-parity stack (tests/test_evaluate_parity.py): the five tiny cells, in this
# order, in ONE reference call (one program: one team class per network). Each parity
# check scores its cell unchanged at its position, the others moved to its difficulty and
# step cap, so every check in that module shares the program.
PARITY_STACK = (
    "tiny/ippo-rnn/easy/seed0",
    "tiny/ippo-rnn/hard/seed2",  # 1000-step cap, non-zero achievements
    "tiny/mappo-rnn/medium/seed0",
    "tiny/hypermarl-rnn/hard/seed0",
    "tiny/pqn-vdn-rnn/easy/seed0",
)

CELL_DIFFICULTY = {
    "tiny/ippo-rnn/easy/seed0": "easy",
    "tiny/ippo-rnn/hard/seed2": "hard",
    "tiny/mappo-rnn/medium/seed0": "medium",
    "tiny/hypermarl-rnn/hard/seed0": "hard",
    "tiny/pqn-vdn-rnn/easy/seed0": "easy",
    "full/ippo-rnn/hard/seed1": "hard",
}


@dataclasses.dataclass(frozen=True)
class Cell:
    cell_id: str
    cfg: Any
    weights: Any
    upstream: dict  # upstream_eval.json

    @property
    def difficulty(self) -> str:
        return CELL_DIFFICULTY[self.cell_id]

    def upstream_episodes(self) -> list[dict]:
        return self.upstream["eval_per_episode"][self.difficulty]


@functools.cache
def load(cell_id: str) -> Cell:
    """Config, policy weights and upstream numbers of a fixture cell (cached)."""
    from alem_eval.model.loader import load_cell

    _budget, algorithm, difficulty, seed = cell_id.split("/")
    d = FIXTURES / cell_id
    loaded = load_cell(
        d,
        algorithm=algorithm,
        difficulty=difficulty,
        seed=int(seed[4:]),
        policy_only=True,
        where=cell_id,
    )
    upstream = json.loads((d / "upstream_eval.json").read_text())
    return Cell(cell_id, loaded.cfg, loaded.weights, upstream)


def with_eval(cfg, **changes):
    """A copy of ``cfg`` with some EvalConfig fields changed (e.g. eval_difficulties)."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **changes))


def diff_records(got: dict, expected: dict) -> list[str]:
    """Human-readable differences between two flat records (exact comparison)."""
    out = []
    for k in sorted(set(got) | set(expected)):
        if k not in got:
            out.append(f"{k}: missing (expected {expected[k]!r})")
        elif k not in expected:
            out.append(f"{k}: unexpected {got[k]!r}")
        elif got[k] != expected[k]:
            out.append(f"{k}: got {got[k]!r}, expected {expected[k]!r}")
    return out


def programs_made() -> int:
    """Rollout programs this process obtained: traced, or loaded from a ``jax.export``
    file another process of the test run wrote (the warm start skips the trace)."""
    from alem_eval.evaluate.machine import TRACE_COUNTS

    return TRACE_COUNTS["rollout"] + TRACE_COUNTS["rollout:loaded"]


def run_on_host_devices(script: str, devices: int) -> dict:
    """Run ``script`` (Python source) in a fresh interpreter that sees ``devices`` CPU
    devices (XLA_FLAGS) and return the JSON it prints on its ``RESULT`` line; the process
    must exit 0 (its stderr's tail is the failure message)."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = dict(
        os.environ,
        XLA_FLAGS=" ".join(  # the run's other XLA flags (conftest's level) kept
            [
                *[f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f],
                f"--xla_force_host_platform_device_count={devices}",
            ]
        ),
        JAX_PLATFORMS="cpu",
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,  # a hang (e.g. host callbacks on several devices) fails, never blocks
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def as_run_teams(run_stack):
    """A fake ``run_stack(cfgs, weights, **kw)`` (one checkpoint per self-play team) as the
    ``run_teams(cfgs, weights, teams, **kw)`` the orchestration calls: checkpoint k of the
    fake is team k, with its member's config and weights (a recording names it by its
    member)."""
    from alem_eval.evaluate.records import RecordTo

    def run_teams(cfgs, weights, teams, *, record=None, **kw):
        assert all(len(set(team)) == 1 for team in teams), teams  # self-play only
        m = [team[0] for team in teams]
        rec = None if record is None else RecordTo(record.recorder, [record.names[i] for i in m])
        return run_stack([cfgs[i] for i in m], [weights[i] for i in m], record=rec, **kw)

    return run_teams
