"""The training driver with a fake trainer (tests/train_fakes.py: no Alem env, compiles in
a second): resume, refusal of saved state that does not match, SIGTERM, the metrics log,
and the command's batch-log progress. The real trainers are in tests/test_trainers.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from alem_eval.core.errors import CheckpointError, ConfigError
from alem_eval.trainers.contract import TrainingStopped
from tests.conftest import REPO
from tests.train_fakes import ALGO, SIZES, SLEEP_ENV, STEPS_PER_UPDATE, make_fake, runs_of
from alem_eval.trainers import resume
from alem_eval.trainers.driver import train_cells


def _train(out: Path, seeds, updates, **kw):
    runs, tcfgs = runs_of(seeds, updates, **kw.pop("overrides", {}))
    dirs = [out / f"tiny/{ALGO}/easy/seed{s}" for s in seeds]
    kw.setdefault("chunk_updates", 1)
    return train_cells(
        make_fake(runs[0], tcfgs[0]),
        runs,
        tcfgs,
        dirs,
        cell_ids=[f"tiny/{ALGO}/easy/seed{s}" for s in seeds],
        **kw,
    ), dirs


def _weights(cell_dir: Path):
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    path = (cell_dir / "checkpoint").absolute()
    args = jax.tree_util.tree_map(
        lambda _: ocp.RestoreArgs(restore_type=np.ndarray), ckptr.metadata(path)
    )
    return ckptr.restore(path, restore_args=args)


def _resume_meta(cell_dir: Path) -> dict:
    return json.loads((cell_dir / "_resume" / "resume.json").read_text())


def _log(cell_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (cell_dir / "train_log.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------------------
# Resume
# ----------------------------------------------------------------------------------------
UNINTERRUPTED = "train-driver-uninterrupted"  # the tests that share its run


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Seeds 0 and 1 trained together for 6 updates in one go: their cell dirs."""
    return _train(tmp_path_factory.mktemp("uninterrupted"), (0, 1), 6)[1]


@pytest.mark.xdist_group(UNINTERRUPTED)
def test_resume_continues_to_the_uninterrupted_result(tmp_path, uninterrupted):
    assert _train(tmp_path, (0, 1), 6, max_updates=2)[0] is None
    res, dirs = _train(tmp_path, (0, 1), 6)
    assert [r.summary["resumed_from_update"] for r in res] == [2, 2]
    for a, b in zip(uninterrupted, dirs, strict=True):
        jax.tree_util.tree_map(np.testing.assert_array_equal, _weights(a), _weights(b))
        assert int(_weights(b)["step"]) == 6 and not (b / "_resume").exists()
    assert not np.array_equal(_weights(uninterrupted[0])["w"], _weights(uninterrupted[1])["w"])


def test_metrics_log_has_a_line_per_update(tmp_path):
    """One ``chunk`` line per compiled call and seed (here one update per call), with the
    per-update means; appended across a resume."""
    _train(tmp_path, (0, 1), 4, max_updates=3)
    _train(tmp_path, (0, 1), 4)
    d = tmp_path / f"tiny/{ALGO}/easy/seed1"
    lines = _log(d)
    assert [x["event"] for x in lines] == [
        "start",
        "chunk",
        "chunk",
        "chunk",
        "saved",
        "start",
        "chunk",
        "done",
    ]
    chunks = [x for x in lines if x["event"] == "chunk"]
    assert [x["update"] for x in chunks] == [1, 2, 3, 4]
    assert all(
        x["updates_in_call"] == 1 and x["env_steps"] == x["update"] * STEPS_PER_UPDATE
        for x in chunks
    )
    assert all(x["mean_episode_return"] is not None and "loss/total" in x for x in chunks)
    assert lines[0]["seed"] == 1 and lines[5]["resumed_from"] == 3


def test_saved_state_from_other_settings_is_refused_and_kept(tmp_path):
    _train(tmp_path, (0, 1), 4, max_updates=2)
    before = [_resume_meta(d) for d in (tmp_path / f"tiny/{ALGO}/easy").iterdir()]
    with pytest.raises(ConfigError, match=r"total_timesteps 16 -> 24.*--fresh"):
        _train(tmp_path, (0, 1), 6)  # another budget: another LR schedule
    with pytest.raises(ConfigError, match=r"lr .*--fresh"):
        _train(tmp_path, (0, 1), 4, overrides={"LR": "1e-3"})
    after = [_resume_meta(d) for d in (tmp_path / f"tiny/{ALGO}/easy").iterdir()]
    assert before == after and all(m["updates"] == 2 for m in after)


def test_a_group_that_does_not_match_its_saved_state_is_refused(tmp_path):
    """Seeds saved apart never silently restart together: a new member without state, or
    members at different updates, stop with one line and keep every save."""
    _train(tmp_path, (0, 1), 6, max_updates=2)
    with pytest.raises(ConfigError, match=r"seed2 has none") as err:
        _train(tmp_path, (0, 1, 2), 6)
    assert "\n" not in str(err.value)
    _train(tmp_path, (2,), 6, max_updates=3)
    with pytest.raises(ConfigError, match=r"different updates .*seed0 at 2.*seed2 at 3"):
        _train(tmp_path, (0, 1, 2), 6)
    assert [_resume_meta(tmp_path / f"tiny/{ALGO}/easy/seed{s}")["updates"] for s in (0, 1, 2)] == [
        2,
        2,
        3,
    ]
    # seeds with matching state resume in any grouping (each cell holds its own slice)
    res, _ = _train(tmp_path, (1,), 6)
    assert res[0].summary["resumed_from_update"] == 2


def test_damaged_saved_state_is_an_error_and_fresh_starts_over(tmp_path):
    _, dirs = _train(tmp_path, (0,), 4, max_updates=2)
    state = dirs[0] / "_resume" / _resume_meta(dirs[0])["state"]
    state.rename(state.with_name("elsewhere"))
    with pytest.raises(CheckpointError, match="missing"):
        _train(tmp_path, (0,), 4)
    res, _ = _train(tmp_path, (0,), 4, fresh=True)
    assert res[0].summary["resumed_from_update"] is None


class Killed(BaseException):
    """The process dies here (as on SIGKILL): nothing after it runs, no handler saves."""


def _kill_at_file_op(monkeypatch, k: int) -> list[int]:
    """From now on the resume store's ``k``-th file operation (counting from 0: a seed's
    state written, a resume.json written, a directory removed) kills instead of running;
    returns the counter of those that ran."""
    import orbax.checkpoint as ocp

    done = [0]

    def op(fn):
        def run(*args, **kwargs):
            if done[0] == k:
                raise Killed
            done[0] += 1
            return fn(*args, **kwargs)

        return run

    monkeypatch.setattr(resume, "write_json_atomic", op(resume.write_json_atomic))
    monkeypatch.setattr(resume, "shutil", SimpleNamespace(rmtree=op(shutil.rmtree)))
    monkeypatch.setattr(ocp.PyTreeCheckpointer, "save", op(ocp.PyTreeCheckpointer.save))
    return done


@pytest.mark.parametrize("before", [None, 2], ids=["first-save", "later-save"])
def test_a_kill_anywhere_in_a_group_save_resumes_at_the_newest_update_a_seed_saved(
    tmp_path, monkeypatch, before
):
    """A save of a group killed after any of its file operations: the group still resumes
    (no seeds left at different updates), at the newest update any seed's resume.json
    names (no saved progress lost), with each seed's own slice of that update's state."""

    def state(updates):  # seed i's slice is row i
        return {"w": np.arange(12.0).reshape(3, 4) * 100 + updates}

    ids = [f"tiny/{ALGO}/easy/seed{s}" for s in range(3)]

    def store(root):
        return resume.ResumeStore(
            [root / i for i in ids], ids, identity="0123abcd", settings={"lr": 1}
        )

    if before is not None:
        store(tmp_path / "base").save(state(before), {"updates": before})
    with monkeypatch.context() as m:  # how many file operations one save makes
        ops = _kill_at_file_op(m, -1)
        store(tmp_path / "count").save(state(4), {"updates": 4})
    for k in range(ops[0]):
        case = tmp_path / f"kill{k}"
        if before is not None:
            shutil.copytree(tmp_path / "base", case)
        with monkeypatch.context() as m, pytest.raises(Killed):
            _kill_at_file_op(m, k)
            store(case).save(state(4), {"updates": 4})
        named = [json.loads(p.read_text())["updates"] for p in case.rglob(resume.META_FILE)]
        saved = store(case).check()
        if not named:
            assert saved is None, k
            continue
        assert [s.updates for s in saved] == [max(named)] * 3, k
        shape = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state(4))
        host = store(case).load(shape, saved)
        np.testing.assert_array_equal(host["w"], state(max(named))["w"], err_msg=f"kill {k}")


@pytest.mark.xdist_group(UNINTERRUPTED)
def test_a_group_killed_between_its_seeds_saves_resumes_to_the_uninterrupted_result(
    tmp_path, monkeypatch, uninterrupted
):
    """Killed while saving update 4, after seed 0's resume.json moved to it and before
    seed 1's did: the rerun resumes both seeds at 4 and ends bit-identical to a run
    never interrupted."""
    write = resume.write_json_atomic

    def killing(path, data):
        if Path(path).parent.parent.name == "seed1" and data["updates"] == 4:
            raise Killed
        write(path, data)

    with monkeypatch.context() as m, pytest.raises(Killed):
        m.setattr(resume, "write_json_atomic", killing)
        _train(tmp_path, (0, 1), 6, save_every_updates=2, max_updates=4)
    assert [_resume_meta(tmp_path / f"tiny/{ALGO}/easy/seed{s}")["updates"] for s in (0, 1)] == [
        4,
        2,
    ]
    res, dirs = _train(tmp_path, (0, 1), 6)
    assert [r.summary["resumed_from_update"] for r in res] == [4, 4]
    for a, b in zip(uninterrupted, dirs, strict=True):
        jax.tree_util.tree_map(np.testing.assert_array_equal, _weights(a), _weights(b))
        assert int(_weights(b)["step"]) == 6 and not (b / "_resume").exists()


# ----------------------------------------------------------------------------------------
# Signals
# ----------------------------------------------------------------------------------------
def test_sigterm_saves_the_state_and_stops(tmp_path):
    """SIGTERM during training (here sent from the progress callback after update 2): the
    call in flight finishes, the state is saved, TrainingStopped is raised, the previous
    handler is back; a rerun resumes from the save to the uninterrupted result."""
    before = signal.getsignal(signal.SIGTERM)

    def kill_at_2(p):
        if p.phase == "training" and p.updates == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingStopped) as stop:
        _train(tmp_path / "b", (0, 1), 5, on_progress=kill_at_2)
    assert stop.value.signum == signal.SIGTERM and stop.value.updates == 2
    assert signal.getsignal(signal.SIGTERM) is before
    d = tmp_path / f"b/tiny/{ALGO}/easy/seed0"
    assert _resume_meta(d)["updates"] == 2
    assert _log(d)[-1]["event"] == "stopped" and _log(d)[-1]["signal"] == "SIGTERM"
    res, dirs = _train(tmp_path / "b", (0, 1), 5)
    assert res[0].summary["resumed_from_update"] == 2
    _, ref = _train(tmp_path / "a", (0, 1), 5)
    for a, b in zip(ref, dirs, strict=True):
        jax.tree_util.tree_map(np.testing.assert_array_equal, _weights(a), _weights(b))


def _cli(out: Path, *extra: str) -> list[str]:
    args = [
        "-m",
        "tests.train_fakes",
        f"tiny/{ALGO}/easy/seed0,seed1",
        "--total-timesteps",
        str(40 * STEPS_PER_UPDATE),
        "--out",
        str(out),
        "--log-every",
        "0",
        *extra,
    ]
    for k, v in SIZES.items():
        args += ["--set", f"{k}={v}"]
    return [sys.executable, *args]


def _cli_env(tmp_path: Path, sleep_s: float) -> dict[str, str]:
    return {**os.environ, SLEEP_ENV: str(sleep_s), "ALEM_EVAL_CACHE": str(tmp_path / "cache")}


@pytest.mark.slow
def test_sigterm_to_the_train_command_saves_and_a_rerun_resumes(tmp_path):
    """``alem-eval train`` (fake trainer, ~0.2 s per update) gets SIGTERM after its first
    progress line; it exits 143 with one line saying where the state is, the state exists,
    and the rerun resumes from it instead of from scratch."""
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        _cli(out), cwd=REPO, env=_cli_env(tmp_path, 0.2), stderr=subprocess.PIPE, text=True
    )
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stderr:  # progress lines: stderr is a pipe, not a terminal
        seen.append(line)
        if " update " in line:
            proc.send_signal(signal.SIGTERM)
            break
        assert time.monotonic() < deadline, seen
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, [*seen, rest]
    assert "Traceback" not in rest and "alem-eval: SIGTERM: resume state at update" in rest, rest
    saved = [_resume_meta(out / f"tiny/{ALGO}/easy/seed{s}")["updates"] for s in (0, 1)]
    assert saved[0] == saved[1] and 1 <= saved[0] < 40

    again = subprocess.run(
        _cli(out),
        cwd=REPO,
        env=_cli_env(tmp_path, 0.0),
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    summary = json.loads((out / f"tiny/{ALGO}/easy/seed0/config.json").read_text())
    assert summary["training_summary"]["resumed_from_update"] == saved[0]
    assert int(_weights(out / f"tiny/{ALGO}/easy/seed0")["step"]) == 40
    # batch-log progress: dated lines with the update count, one per compiled call here
    lines = [x for x in again.stderr.splitlines() if " update " in x]
    assert len(lines) >= 1 and "update 40/40" in again.stderr, again.stderr
    assert lines[0][:4].isdigit() and "steps/s" in lines[0]


def test_batch_log_lines_are_throttled_but_never_skip_the_first_or_last(capsys):
    from types import SimpleNamespace

    from alem_eval.cli.commands.train import Render, train_reporter
    from alem_eval.trainers.contract import Progress

    def p(phase, updates):
        return Progress(phase, ("c",), updates, 10, updates * 4, 40, 100.0, 1.0, 0.5, 9.0)

    view = Render(train_reporter(3600, live=False))
    group = SimpleNamespace(label="g")
    for phase, updates in [
        ("compiling", 0),
        ("training", 1),
        ("training", 2),
        ("saving", 2),
        ("training", 3),
        ("training", 10),
        ("done", 10),
    ]:
        view.progress(group, p(phase, updates))  # type: ignore[arg-type]
    lines = capsys.readouterr().err.splitlines()
    assert [x.split(": ", 1)[1].split("  ")[0] for x in lines] == [
        "compiling (the Alem step takes minutes to compile on CPU)...",
        "update 1/10",
        "8/40 steps",
        "update 10/10",
        "40/40 steps",
    ]
    assert all(x[:4].isdigit() and " g: " in x for x in lines)


def test_finished_line_shows_no_rate_when_every_update_ran_in_the_compiling_call(capsys, tmp_path):
    """A run short enough that only the first (compiling, untimed) call ran has no measured
    throughput: the closing line says '-' instead of claiming 0 steps/s."""
    from types import SimpleNamespace

    from alem_eval.cli.commands.train import Render, train_reporter
    from alem_eval.trainers.contract import CellResult
    from alem_eval.trainers.planning import GroupOutcome

    summary = {
        "total_timesteps": 32,
        "wall_time_s": 1.0,
        "compile_time_s": 40.0,
        "steps_per_second": None,
        "final_metrics": {"mean_episode_return": 0.5},
    }
    group = SimpleNamespace(label="g", cells=[SimpleNamespace(id="tiny/ippo-rnn/easy/seed0")])
    results = [CellResult(tmp_path, summary)]
    Render(train_reporter(0, live=False)).finished(GroupOutcome(group, results))  # type: ignore[arg-type]
    Render(train_reporter(0, live=False)).finished(
        GroupOutcome(group, [CellResult(tmp_path, {**summary, "steps_per_second": 1234.5})])  # type: ignore[arg-type]
    )
    first, second = capsys.readouterr().err.strip().splitlines()
    assert "(40s of it compiling), - steps/s; final return 0.50" in first
    assert "0 steps/s" not in first
    assert "1,234 steps/s" in second or "1,235 steps/s" in second
