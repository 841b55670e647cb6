"""STACKING, the 'fast' protocol, early exit and multi-device sharding of the evaluator."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from alem_eval.evaluate.records import upstream_view
from alem_eval.evaluate.rollout import run_stack
from alem_eval.evaluate.settings import (
    EPISODE_COLUMNS,
    FAST_MAX_STEPS,
    FAST_NUM_EPISODES,
    FAST_WORLD_SEED,
    fast_keys,
    record_columns,
)
from tests.conftest import REPO
from tests.eval_support import (
    EVALUATOR_GROUP,
    FAST_EPISODES,
    diff_records,
    load,
    programs_made,
    run_on_host_devices,
)

# Tests that play share the evaluator group's programs (one worker: tests/eval_support.py);
# the others (plain functions, errors raised before anything compiles) run on any worker,
# in the fast lane.
PLAYS = pytest.mark.xdist_group(EVALUATOR_GROUP)

IPPO_EASY = "tiny/ippo-rnn/easy/seed0"
FAST_STEPS = 1000


def _fast(cell, difficulty):
    return run_stack(
        [cell.cfg],
        [cell.weights],
        protocol="fast",
        eval_difficulty=difficulty,
        num_episodes=FAST_EPISODES,
        max_steps=FAST_STEPS,
    )


@PLAYS
def test_fast_protocol_is_deterministic_and_exits_early():
    cell = load(IPPO_EASY)
    first = _fast(cell, "easy")
    before = programs_made()
    second = _fast(cell, "easy")
    assert second.records == first.records
    assert len(first.records) == 1 and len(first.records[0]) == FAST_EPISODES
    lengths = [r["episode_length"] for r in first.records[0]]
    for rec in first.records[0]:
        n = int(rec["episode_length"])
        assert 1 <= n <= FAST_STEPS
        assert (rec["terminated"] == 1.0) or n == FAST_STEPS
    # these near-untrained agents die long before the cap: the loop exits early, at the
    # step the longest episode ends (every episode has its own slot here)
    assert max(lengths) < FAST_STEPS
    assert list(first.starts[0]) == [0] * FAST_EPISODES
    assert first.slot_steps == max(lengths) * FAST_EPISODES
    # Every record column is known before any episode is played (what compare checks a
    # metric name against), and nothing is missing from it.
    columns = record_columns(cell.cfg)
    assert {k for rec in first.records[0] for k in rec} <= set(columns)
    assert {"Team/achievement_pct", "Agent2/xp", *EPISODE_COLUMNS} <= set(columns)
    # Another difficulty reuses the same compiled program (difficulty is a traced value).
    hard = _fast(cell, "hard")
    assert programs_made() == before
    assert hard.records != first.records


@PLAYS
def test_a_short_run_compiles_with_quicker_xla_options_and_identical_records(monkeypatch):
    """A short run's rollout is compiled with SHORT_RUN_OPTIONS (LLVM -O1): its records are
    those of XLA's default options, bit for bit, and the traced program is one (the
    options are part of the program key and the compilation cache key, not the trace)."""
    import dataclasses

    from alem_eval.evaluate import group
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from alem_eval.evaluate.programs import _PROGRAMS, SHORT_RUN_OPTIONS, compile_options_for

    chosen: list[tuple] = []

    def spy(env_steps: int) -> tuple:
        chosen.append(compile_options_for(env_steps))
        return chosen[-1]

    monkeypatch.setattr(group, "compile_options_for", spy)
    cell = load(IPPO_EASY)
    quick = _fast(cell, "easy")  # the shape of the test above: a short run
    assert chosen == [SHORT_RUN_OPTIONS]
    traced, keys = TRACE_COUNTS["rollout"], set(_PROGRAMS)
    monkeypatch.setattr(group, "compile_options_for", lambda env_steps: ())
    default = _fast(cell, "easy")
    assert default.records == quick.records
    (new,) = set(_PROGRAMS) - keys
    assert new.compile_options == ()  # the same program, XLA's default options
    assert dataclasses.replace(new, compile_options=SHORT_RUN_OPTIONS) in _PROGRAMS
    assert TRACE_COUNTS["rollout"] == traced  # the exported trace was loaded, not retraced


def test_only_short_runs_on_a_cpu_get_the_quicker_compile_options(monkeypatch):
    import jax

    from alem_eval.evaluate import programs

    assert programs.compile_options_for(8 * 300) == programs.SHORT_RUN_OPTIONS
    assert programs.compile_options_for(programs.SHORT_RUN_STEPS + 1) == ()
    assert programs.compile_options_for(FAST_NUM_EPISODES * FAST_MAX_STEPS) == ()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert programs.compile_options_for(8 * 300) == ()


@PLAYS
def test_a_selection_of_four_algorithms_on_three_difficulties_compiles_one_rollout(cell_copy):
    """The five tiny cells (4 algorithms, trained on easy, medium and hard) and a copy of
    the easy IPPO cell said to be trained on medium, each scored on its own difficulty in
    one ``score_cells``: every stack is padded to the networks of the whole selection (a
    difficulty lacking a network plays a copy of another difficulty's cell, unreported),
    so ONE rollout program scores all three difficulties (difficulty is traced data, not a
    shape), and a cell's records are those of an evaluator call on that cell alone.

    The alone calls cover IPPO on all three difficulties (one program: same network) and
    HyperMARL (the most distinct tree: hypernetwork heads); each algorithm alone would be
    a program of its own (this test once compiled six, about five minutes on the CPU)."""
    import shutil

    from alem_eval.evaluate.programs import _PROGRAMS
    from alem_eval.hub.sources import open_source
    from alem_eval.scoring.score import ScoreOptions, score_cells
    from tests.conftest import TINY_CELLS

    easy_dir = cell_copy(TINY_CELLS[0])
    for cell_id in TINY_CELLS[1:]:
        cell_copy(cell_id)
    medium_dir = easy_dir.parents[1] / "medium" / "seed0"  # the easy cell, trained on medium
    shutil.copytree(easy_dir, medium_dir)
    config = json.loads((medium_dir / "config.json").read_text())
    config["env_config"]["coordination_difficulty"] = "medium"
    config["config"].update(TRAINING_COORDINATION_DIFFICULTY="medium", EVAL_DIFFICULTIES=["medium"])
    (medium_dir / "config.json").write_text(json.dumps(config))
    source = open_source(easy_dir.parents[3])
    cells = source.select(["tiny"])
    medium_id = "tiny/ippo-rnn/medium/seed0"
    assert sorted(c.id for c in cells) == sorted((*TINY_CELLS, medium_id))
    assert len({c.algorithm for c in cells}) == 4 and len({c.difficulty for c in cells}) == 3
    made, programs = programs_made(), len(_PROGRAMS)
    scores = score_cells(
        source, cells, options=ScoreOptions(num_episodes=FAST_EPISODES, max_steps=12)
    )
    # (none when an earlier test of the group compiled the same shapes: 1 alone)
    assert programs_made() - made <= 1 and len(_PROGRAMS) - programs <= 1
    assert [s.cell.id for s in scores] == [c.id for c in cells]
    got = {s.cell.id: [dict(e) for e in s.episodes] for s in scores}
    for s in scores:
        assert s.eval_difficulty == s.cell.difficulty
    easy = load(IPPO_EASY)
    alone_of = {
        IPPO_EASY: (easy, "easy"),
        medium_id: (easy, "medium"),
        "tiny/ippo-rnn/hard/seed2": (load("tiny/ippo-rnn/hard/seed2"), "hard"),
        "tiny/hypermarl-rnn/hard/seed0": (load("tiny/hypermarl-rnn/hard/seed0"), "hard"),
    }
    for cell_id, (cell, difficulty) in alone_of.items():
        alone = run_stack(
            [cell.cfg],
            [cell.weights],
            protocol="fast",
            eval_difficulty=difficulty,
            num_episodes=FAST_EPISODES,
            max_steps=12,
        )
        assert got[cell_id] == alone.records[0], cell_id
    assert got[IPPO_EASY] != got[medium_id]  # same weights: the difficulty made the difference


def test_fast_defaults_follow_the_spec():
    assert (FAST_NUM_EPISODES, FAST_MAX_STEPS, FAST_WORLD_SEED) == (20, 10_000, 9999)
    worlds, chains = fast_keys(3)
    import jax
    import numpy as np

    for i in range(3):
        assert np.array_equal(np.asarray(worlds[i]), np.asarray(jax.random.PRNGKey(9999 + i)))
        assert np.array_equal(
            np.asarray(chains[i]), np.asarray(jax.random.fold_in(jax.random.PRNGKey(9999 + i), 1))
        )


_SHARDED_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    import jax
    from alem_eval.evaluate.programs import _PROGRAMS
    from alem_eval.evaluate.rollout import score_stack
    from tests.eval_support import load
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache()  # the session's cache ($ALEM_EVAL_JAX_CACHE)
    assert jax.local_device_count() == 4, jax.devices()
    cell = load({cell!r})
    ref = score_stack([cell.cfg, cell.cfg], [cell.weights, cell.weights],
                      protocol="reference", eval_difficulty="easy")
    fast = score_stack([cell.cfg], [cell.weights], protocol="fast", eval_difficulty="easy",
                       num_episodes={episodes}, max_steps={steps})
    devices = sorted({{k.num_devices for k in _PROGRAMS}})
    print("RESULT" + json.dumps({{"ref": ref, "fast": fast, "devices": devices}}))
""")


@pytest.mark.slow
@pytest.mark.xdist_group("evaluator-sharded")  # its own process: may run beside the others
def test_sharded_over_four_cpu_devices_matches_single_device():
    cell = load(IPPO_EASY)
    script = _SHARDED_SCRIPT.format(
        repo=str(REPO), cell=IPPO_EASY, episodes=FAST_EPISODES, steps=FAST_STEPS
    )
    out = run_on_host_devices(script, 4)
    assert out["devices"] == [2, 4]  # reference: 2 checkpoints on 2 devices; fast: 4 episodes
    expected = cell.upstream_episodes()
    for recs in out["ref"]:
        for i, (rec, exp) in enumerate(zip(recs, expected)):
            assert not diff_records(upstream_view(rec, i), exp)
    single = _fast(cell, "easy").records
    assert out["fast"] == single


_WARM_SCRIPT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {repo!r})
    t0 = time.perf_counter()
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from alem_eval.evaluate.rollout import run_stack
    from tests.eval_support import load
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache()  # the session's cache ($ALEM_EVAL_JAX_CACHE)
    cell = load({cell!r})
    res = run_stack([cell.cfg], [cell.weights], protocol="fast", eval_difficulty="easy",
                    num_episodes={episodes}, max_steps={steps})
    print("RESULT" + json.dumps({{"records": res.records, "counts": dict(TRACE_COUNTS),
                               "wall_s": time.perf_counter() - t0}}))
""")


def _score_in_new_process():
    script = _WARM_SCRIPT.format(
        repo=str(REPO), cell=IPPO_EASY, episodes=FAST_EPISODES, steps=FAST_STEPS
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@PLAYS
def test_a_new_process_reuses_the_traced_program_and_scores_identically():
    here = _fast(load(IPPO_EASY), "easy")  # this process traced or loaded it: it is exported
    other = _score_in_new_process()
    assert other["counts"].get("rollout", 0) == 0, other["counts"]  # no Python trace
    assert other["counts"].get("rollout:loaded", 0) == 1
    assert other["counts"].get("reset:traced", 0) == 0  # world generation: loaded too
    assert other["counts"].get("score:traced", 0) == 0
    assert other["records"] == here.records


def test_the_warm_start_key_hashes_every_module_of_the_play_core(monkeypatch):
    """An exported program is reused only by the code that traced it: the key's source hash
    reads every module of ``alem_eval.evaluate`` (subpackages too) and the model and env
    code the programs close over."""
    from pathlib import Path

    from alem_eval.evaluate import programs

    read: set[Path] = set()
    original = Path.read_bytes

    def spy(self):
        read.add(self.resolve())
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    programs._code_identity.__wrapped__()
    package = Path(programs.__file__).resolve().parents[1]  # alem_eval
    expected = {p.resolve() for p in (package / "evaluate").rglob("*.py")} | {
        (package / name).resolve()
        for name in ("model/policies.py", "model/networks.py", "envs/eval_env.py")
    }
    assert len(expected) > 3 and expected <= read, sorted(map(str, expected - read))
