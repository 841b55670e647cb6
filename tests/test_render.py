"""RENDER: one fast-protocol episode drawn with alem's own pixel renderer, streamed to a GIF.

One short episode of a mixed team (IPPO, PQN, IPPO) is rendered once per module; the
evaluator plays the same team and episode with recording on, and the two must agree step
by step. Frames: frame 0 is the reset world, frame t the state after step t. The same
team with a focal agent (the JAX script) in PQN's slot is rendered once too (a scenario
team), and the play core's run of that team with recording on (the program render's run
compiled) must agree with it.
"""

from __future__ import annotations

import io
import json
import stat
import sys
import types

import numpy as np
import pytest

from alem_eval.evaluate.group import reset_worlds
from alem_eval.evaluate.records import RecordTo
from alem_eval.evaluate.rollout import run_teams
from alem_eval.evaluate.settings import eval_statics, fast_keys
from alem_eval.rendering import episode as R, frames as F, player as P, writers as W
from alem_eval.core.errors import EvaluationError, UsageError
from tests.clitools import (
    assert_one_line_error,
    cli_env,
    closed_port_url,
    run_cli_in_process,
)
from tests.conftest import FIXTURES
from tests.eval_support import load

IPPO = "tiny/ippo-rnn/easy/seed0"
PQN = "tiny/pqn-vdn-rnn/easy/seed0"
TEAM = f"{IPPO}+{PQN}+{IPPO}"
STEPS = 5
SCALE = 2
# The tests that share the rendered episode (and its compiled programs) run in one worker
# (--dist loadgroup); the world's reset comes from the evaluator's saved programs.
RENDER_GROUP = "render"


class StepsRecorder:
    """The evaluator's recorded steps of one episode (``RecordTo`` call protocol)."""

    def __init__(self):
        self.parts: list[dict[str, np.ndarray]] = []
        self.meta: dict = {}

    def add_steps(self, team, episode, t0, arrays):
        assert t0 == sum(len(p["actions"]) for p in self.parts)
        self.parts.append({k: np.array(v) for k, v in arrays.items()})

    def finish_episode(self, team, episode, meta):
        self.meta = dict(meta)

    def field(self, name: str) -> np.ndarray:
        return np.concatenate([p[name] for p in self.parts])


def reset_views(episode: int) -> np.ndarray:
    """The renderer's views ``[P, H, W, 3]`` of the fast protocol's reset world ``episode``
    (``PRNGKey(9999 + episode)``), drawn here directly."""
    import jax
    from alem_eval.envs.eval_env import get_eval_env

    world = eval_statics(load(IPPO).cfg).world
    env = get_eval_env(world)
    key = fast_keys(episode + 1)[0][episode]
    _, state = reset_worlds(world, env.difficulty_params("easy"), [key])
    return views_of(jax.tree_util.tree_map(lambda x: x[0], state), world)


def views_of(state, world) -> np.ndarray:
    from alem.alem_coop.constants import TEXTURES, load_player_specific_textures
    from alem.alem_coop.renderer.renderer_pixels import render_alem_pixels
    from alem_eval.envs.eval_env import get_eval_env

    textures = load_player_specific_textures(TEXTURES[F.BLOCK_PIXELS], world.num_agents)
    static = get_eval_env(world).static_env_params
    return np.asarray(render_alem_pixels(state, F.BLOCK_PIXELS, static, textures)).astype(np.uint8)


def assert_views_in_frame(frame: np.ndarray, views: np.ndarray) -> None:
    """``frame``'s top rows are ``views`` side by side, each pixel repeated SCALE times."""
    p, h, w, _ = views.shape
    for a in range(p):
        x = a * (w + F._GAP) * SCALE
        big = views[a].repeat(SCALE, 0).repeat(SCALE, 1)
        np.testing.assert_array_equal(frame[: h * SCALE, x : x + w * SCALE], big)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    from alem_eval.hub.sources import open_source

    out = tmp_path_factory.mktemp("render") / "team.gif"
    frames: list[tuple[P.EpisodeStep, np.ndarray]] = []
    result = R.render_episode(
        open_source(str(FIXTURES)),
        TEAM,
        out=out,
        max_steps=STEPS,
        scale=SCALE,
        on_frame=lambda step, frame: frames.append((step, frame)),
    )
    return result, frames


@pytest.fixture(scope="module")
def evaluator():
    cells = [load(IPPO), load(PQN)]
    rec = StepsRecorder()
    res = run_teams(
        [c.cfg for c in cells],
        [c.weights for c in cells],
        [(0, 1, 0)],
        protocol="fast",
        eval_difficulty="easy",
        num_episodes=1,
        max_steps=STEPS,
        record=RecordTo(rec, [IPPO, PQN]),
    )
    return res.records[0][0], rec


@pytest.mark.xdist_group(RENDER_GROUP)
def test_render_plays_the_episode_the_evaluator_scores(rendered, evaluator):
    result, frames = rendered
    record, rec = evaluator
    assert result.team == (IPPO, PQN, IPPO) and result.eval_difficulty == "easy"
    assert result.steps == record["episode_length"] == rec.meta["length"]
    assert result.episode_return == record["episode_return"]
    assert result.terminated == bool(record["terminated"])
    np.testing.assert_array_equal(result.actions, rec.field("actions"))
    # The captions' achievement counts are the team's, step by step.
    counts = [int(step.achievements.sum()) for step, _ in frames[1:]]
    assert counts == rec.field("team_achievements").tolist()


@pytest.fixture(scope="module")
def rendered_focal(tmp_path_factory):
    """The mixed team with the ``scripted`` focal (a JAX agent) in slot 1, PQN's."""
    from alem_eval.hub.sources import open_source

    frames: list[P.EpisodeStep] = []
    result = R.render_episode(
        open_source(str(FIXTURES)),
        TEAM,
        focal="scripted",
        slots=(FOCAL_SLOT,),
        out=tmp_path_factory.mktemp("render") / "focal.gif",
        max_steps=STEPS,
        scale=SCALE,
        on_frame=lambda step, frame: frames.append(step),
    )
    return result, frames


FOCAL_SLOT = 1


@pytest.mark.xdist_group(RENDER_GROUP)
def test_render_draws_a_scenario_team_as_the_play_core_plays_it(rendered_focal):
    from alem_eval.evaluate.agent_runs import run_agent_teams
    from alem_eval.evaluate.agent_spec import load_focal
    from alem_eval.evaluate.reference_agents import script

    result, frames = rendered_focal
    focal = "focal:scripted"
    assert result.team == (IPPO, focal, IPPO) and result.frames == result.steps + 1
    assert [s.t for s in frames] == list(range(result.steps + 1))
    # The scenario's play core (run_agent_teams) on the same team and world, recorded one
    # step per call: the program render's run compiled, so nothing new compiles here.
    ippo = load(IPPO)
    rec = StepsRecorder()
    played = run_agent_teams(
        [ippo.cfg, ippo.cfg],
        [ippo.weights, None],
        [(0, 1, 0)],
        {1: load_focal("scripted")},
        protocol="fast",
        eval_difficulty="easy",
        num_episodes=1,
        max_steps=STEPS,
        chunk=1,
        record=RecordTo(rec, [IPPO, focal]),
    )
    record = played.records[0][0]
    assert result.steps == record["episode_length"] == rec.meta["length"]
    assert result.episode_return == record["episode_return"]
    np.testing.assert_array_equal(result.actions, rec.field("actions"))
    # The focal's slot holds the script's actions, on the legal actions it was shown.
    legal = rec.field("legal_actions")[:, FOCAL_SLOT]
    _, wanted = script(np, np.arange(result.steps), legal)
    np.testing.assert_array_equal(result.actions[:, FOCAL_SLOT], wanted)
    # ... and the cells' slots are not the script's (IPPO plays them).
    for slot in (0, 2):
        _, theirs = script(np, np.arange(result.steps), rec.field("legal_actions")[:, slot])
        assert not np.array_equal(result.actions[:, slot], theirs)


@pytest.mark.xdist_group(RENDER_GROUP)
def test_the_gif_has_a_frame_per_state_and_they_are_the_renderers_views(rendered):

    result, frames = rendered
    assert result.frames == result.steps + 1 == len(frames)
    assert [step.t for step, _ in frames] == list(range(result.steps + 1))
    gif = list(W.gif_frames(result.path))
    assert len(gif) == result.frames
    for got, (_, exact) in zip(gif, frames, strict=True):  # a palette per frame: near-exact
        assert got.shape == exact.shape
        diff = np.abs(got.astype(int) - exact.astype(int))
        assert diff.mean() < 1.0 and (diff.max(axis=-1) == 0).mean() > 0.9

    # Frame 0 is the reset world PRNGKey(9999 + 0), the last frame the last state; both
    # are the renderer's views above the caption strip of that step.
    world = eval_statics(load(IPPO).cfg).world
    for t, views in ((0, reset_views(0)), (result.steps, views_of(frames[-1][0].state, world))):
        step, frame = frames[t]
        assert_views_in_frame(frame, views)
        p, h, w, _ = views.shape
        caption = F.caption_lines(
            step,
            frames[t - 1][0].achievements if t else None,
            max_steps=STEPS,
            labels=result.team,
            action_names=F.action_names(p, world.num_comm_channels),
            achievement_names=F.achievement_names(),
            comm=True,
        )
        strip = F.caption_strip(
            caption,
            width=frame.shape[1],
            view_width=w * SCALE,
            gap=F._GAP * SCALE,
            scale=SCALE,
            colors=F._agent_colors(p),
        )
        np.testing.assert_array_equal(frame[h * SCALE :], strip)
    last_step, _ = frames[-1]
    caption = F.caption_lines(
        last_step,
        None,
        max_steps=STEPS,
        labels=result.team,
        action_names=F.action_names(3, 4),
        achievement_names=F.achievement_names(),
        comm=True,
    )
    assert caption.header.startswith(f"step {STEPS}/{STEPS}   team achievements ")
    names = F.action_names(3, 4)
    assert [lines[1] for lines in caption.agents] == [
        names[a][int(x)] for a, x in enumerate(result.actions[-1])
    ]


@pytest.mark.xdist_group(RENDER_GROUP)
def test_episode_i_starts_from_the_fast_protocols_world_i(rendered, tmp_path, monkeypatch):
    from alem_eval.hub.sources import open_source

    metas: list[dict] = []
    finish = P.EpisodeSteps.finish_episode

    def spy(self, team, episode, meta):
        metas.append(dict(meta))
        finish(self, team, episode, meta)

    monkeypatch.setattr(P.EpisodeSteps, "finish_episode", spy)
    first: list[np.ndarray] = []
    result = R.render_episode(
        open_source(str(FIXTURES)),
        TEAM,
        out=tmp_path / "ep1.gif",
        episode=1,
        max_steps=1,
        scale=SCALE,
        on_frame=lambda step, frame: first.append(frame) if step.t == 0 else None,
    )
    assert result.frames == 2 and result.episode == 1
    # the play core played world PRNGKey(9999 + 1) (its recording names the world's key)
    assert [m["world_key"] for m in metas] == [[0, 10000]]
    assert_views_in_frame(first[0], reset_views(1))
    assert not np.array_equal(first[0], rendered[1][0][1])  # another world than episode 0


@pytest.mark.xdist_group(RENDER_GROUP)
def test_cli_renders_the_same_episode(rendered, tmp_path):
    result, _ = rendered
    out = tmp_path / "cli.gif"
    proc = run_cli_in_process(  # in the group's process: the fixture's program serves it
        ["render", TEAM, "--source", str(FIXTURES), "--max-steps", str(STEPS)]
        + ["--scale", str(SCALE), "--out", str(out), "--format", "json"],
        cli_env(tmp_path, closed_port_url()),
    )
    assert proc.returncode == 0, proc.stderr
    (doc,) = json.loads(proc.stdout)
    assert doc == {**result.as_json(), "path": str(out)}
    assert out.read_bytes() == result.path.read_bytes()


def test_the_command_is_one_call_to_alem_eval_render_and_prints_what_it_returns(
    tmp_path, monkeypatch
):
    """``alem-eval render`` hands its options to ``alem_eval.render`` and prints the clip it
    returns (stubbed with a canned one: nothing is drawn)."""
    import numpy as np

    from alem_eval.api import render as api

    out = tmp_path / "clip.gif"
    actions = np.zeros((2, 3), np.int32)
    canned = api.Rendered(out, (IPPO, PQN, IPPO), "hard", 3, 3, 2, True, 0.5, ("A",), actions)
    calls = []

    def render(cells, **kwargs):
        calls.append((cells, kwargs))
        return canned

    monkeypatch.setattr(api, "render", render)
    args = ["render", f"{IPPO}+{PQN}+{IPPO}", "--source", str(FIXTURES), "--episode", "3"]
    args += ["--difficulty", "easy", "--eval-difficulty", "hard", "--max-steps", "2"]
    args += ["--out", str(out), "--fps", "5", "--scale", "2", "--on-env-mismatch", "warn"]
    env = cli_env(tmp_path, closed_port_url())
    proc = run_cli_in_process([*args, "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    assert calls == [
        (
            f"{IPPO}+{PQN}+{IPPO}",
            {
                "out": out,
                "eval_difficulty": "hard",
                "episode": 3,
                "max_steps": 2,
                "fps": 5.0,
                "scale": 2,
                "on_env_mismatch": "warn",
                "source": str(FIXTURES),
                "repo": None,
                "revision": None,
                "cache_dir": None,
                "difficulty": ["easy"],
                "progress": True,
            },
        )
    ]
    assert json.loads(proc.stdout) == [canned.as_json()]
    table = run_cli_in_process(args, env)
    assert table.stdout == f"{out}\n"
    said = "".join(table.stderr.split())  # the console may wrap the line (even in a path)
    assert "".join(f"wrote {out}: 3 frames (2 steps, the env ended it), return".split()) in said


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--out", "x.png"], ["must end in .gif or .mp4", ".png"]),
        (["--out", "x"], ["must end in .gif or .mp4"]),
        (["--episode", "-1"], ["--episode must be an integer from 0"]),
        (["--scale", "0"], ["--scale must be an integer from 1"]),
        (["--fps", "0"], ["--fps must be in"]),
        (["--eval-difficulty", "extreme"], ["unknown eval difficulty 'extreme'"]),
        (["--difficulty", "extreme"], ["matches no cell"]),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, args, fragments):
    proc = run_cli_in_process(
        ["render", IPPO, "--source", str(FIXTURES), *args], cli_env(tmp_path, closed_port_url())
    )
    assert_one_line_error(proc, *fragments)
    assert not list(tmp_path.glob("*.gif"))


def test_dry_run_prints_the_plan_of_the_team_and_its_episode(tmp_path):
    """``render --dry-run`` is one call of ``alem_eval.render(dry_run=True)``: the team's
    cells, one team, one episode of at most --max-steps steps; nothing is loaded or
    written (the focal is named, not loaded: a spec that names no module still plans)."""
    import alem_eval

    args = ["render", TEAM, "--source", str(FIXTURES), "--max-steps", "7", "--episode", "2"]
    args += ["--focal", "no_such_pkg_xyz.agents:make", "--slots", "1", "--dry-run"]
    proc = run_cli_in_process([*args, "--format", "json"], cli_env(tmp_path, closed_port_url()))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["command"] == "render" and plan["dry_run"] is True
    assert [c["cell"] for c in plan["cells"]] == [IPPO]  # the focal took PQN's slot
    assert {k: plan["totals"][k] for k in ("teams", "episodes", "max_env_steps")} == {
        "teams": 1,
        "episodes": 1,
        "max_env_steps": 7,
    }
    team = f"{IPPO} | focal:no_such_pkg_xyz.agents:make | {IPPO}"
    assert plan["notes"][0] == f"episode 2 (world PRNGKey(10001)) of the team {team}"
    assert not list(tmp_path.glob("*.gif"))
    same = alem_eval.render(TEAM, source=str(FIXTURES), max_steps=7, dry_run=True)
    assert [c.cell for c in same.cells] == [IPPO, PQN] and same.teams == 1
    assert same.notes[0].endswith(f"of the team {IPPO} | {PQN} | {IPPO}")


@pytest.mark.parametrize(
    "args, fragments, code",
    [
        (["--focal", "no_such_pkg_xyz.agents:make"], ["no module named"], 2),
        (["--focal", "just-a-name"], ["focal just-a-name: expected package.module"], 2),
        (["--focal", "scripted", "--slots", "3"], ["--slots must name distinct agent slots"], 2),
        (["--focal", "scripted", "--slots", "0,1,2"], ["leaving at least one"], 2),
        (["--focal", "scripted", "--slots", "x"], ["--slots must be agent slots"], 2),
        (["--slots", "1"], ["--slots and --focal-arg go with --focal"], 2),
    ],
)
def test_a_bad_focal_or_slots_is_one_line_exit_2(tmp_path, args, fragments, code):
    proc = run_cli_in_process(
        ["render", IPPO, "--source", str(FIXTURES), "--out", str(tmp_path / "x.gif"), *args],
        cli_env(tmp_path, closed_port_url()),
    )
    assert_one_line_error(proc, *fragments)
    assert proc.returncode == code
    assert not list(tmp_path.glob("*.gif"))


@pytest.mark.parametrize(
    "team, fragment",
    [
        ("tiny/ippo-rnn", "names 2 cells"),
        (f"{IPPO}+{PQN}", "names 2 cells but the env has 3 agents"),
        (f"{IPPO}++{PQN}", "one cell per agent slot joined by '+'"),
        ("tiny/nope", "selector"),
    ],
)
def test_teams_that_do_not_name_one_cell_per_slot_are_one_line_errors(tmp_path, team, fragment):
    proc = run_cli_in_process(
        ["render", team, "--source", str(FIXTURES), "--out", str(tmp_path / "x.gif")],
        cli_env(tmp_path, closed_port_url()),
    )
    assert_one_line_error(proc, fragment)


def test_difficulty_narrows_each_part_of_the_team_to_cells_of_that_difficulty():
    from alem_eval.hub.sources import open_source

    source = open_source(str(FIXTURES))
    with pytest.raises(UsageError, match="names 2 cells"):
        R.resolve_team(source, "tiny/ippo-rnn")
    assert [c.id for c in R.resolve_team(source, "tiny/ippo-rnn", ["hard"])] == [
        "tiny/ippo-rnn/hard/seed2"
    ]


def test_mp4_without_ffmpeg_or_the_video_extra_names_the_extra(monkeypatch):
    monkeypatch.setattr(W.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # not installed
    with pytest.raises(UsageError, match=r"writing \.mp4 needs ffmpeg.*or write a \.gif") as err:
        R.check_output("clip.mp4")
    assert "pip install 'alem-eval[video]'" in str(err.value)
    assert R.check_output("clip.GIF") == "gif"


def test_mp4_uses_the_video_extras_ffmpeg_when_none_is_on_path(monkeypatch, tmp_path):
    bundled = types.ModuleType("imageio_ffmpeg")
    bundled.get_ffmpeg_exe = lambda: str(tmp_path / "ffmpeg-bundled")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", bundled)
    monkeypatch.setattr(W.shutil, "which", lambda name: None)
    assert W.ffmpeg_exe() == str(tmp_path / "ffmpeg-bundled")
    assert R.check_output("clip.mp4") == "mp4"
    # an ffmpeg on PATH comes first
    monkeypatch.setattr(W.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert W.ffmpeg_exe() == "/usr/bin/ffmpeg"


def test_mp4_frames_are_piped_to_ffmpeg_as_raw_rgb(tmp_path):
    """A stand-in ffmpeg records its arguments and the bytes it was sent."""
    fake = tmp_path / "ffmpeg"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "data = sys.stdin.buffer.read()\n"
        "open(sys.argv[-1], 'w').write(json.dumps({'args': sys.argv[1:], 'n': len(data)}))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "clip.mp4"
    writer = W.Mp4Writer(out, fps=12, exe=str(fake))
    frame = np.zeros((5, 7, 3), np.uint8)
    for _ in range(3):
        writer.add(frame)
    writer.close()
    doc = json.loads(out.read_text())
    assert doc["n"] == 3 * 5 * 7 * 3
    args = doc["args"]
    assert args[args.index("-s") + 1] == "7x5" and args[args.index("-r") + 1] == "12"
    assert args[args.index("-pix_fmt") + 1] == "rgb24"


def test_mp4_writer_reports_an_ffmpeg_failure_in_one_line(tmp_path):
    fake = tmp_path / "ffmpeg"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stderr.write('bad codec\\n')\nsys.exit(3)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    writer = W.Mp4Writer(tmp_path / "clip.mp4", exe=str(fake))
    with pytest.raises(EvaluationError, match=r"ffmpeg failed .*exit 3.*bad codec"):
        writer.add(np.zeros((4, 4, 3), np.uint8))
        writer.close()


def test_gif_writer_streams_frames_exactly_when_they_have_few_colours(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    palette = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    frames = [palette[rng.integers(0, 256, (9, 13))] for _ in range(4)]
    path = tmp_path / "x.gif"
    with open(path, "wb") as fh:
        writer = W.GifWriter(fh, fps=20)
        for f in frames:
            writer.add(f)
        writer.close()
    with Image.open(path) as img:
        assert img.info.get("duration") == 50 and img.info.get("loop") == 0
    got = list(W.gif_frames(path))
    assert len(got) == len(frames)
    for g, f in zip(got, frames, strict=True):
        np.testing.assert_array_equal(g, f)


def test_gif_writer_quantises_frames_with_more_than_256_colours_closely():
    from PIL import Image

    x, y = np.meshgrid(np.arange(64), np.arange(48))
    smooth = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)  # 3072 colours
    noise = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    writer = W.GifWriter(buf)
    writer.add(smooth)
    writer.add(noise)
    writer.close()
    with Image.open(io.BytesIO(buf.getvalue())) as img:
        assert img.n_frames == 2
        got = np.asarray(img.convert("RGB"))
    assert np.abs(got.astype(int) - smooth.astype(int)).mean() < 5  # median cut: ~3.4


def test_action_names_follow_the_envs_action_space():
    from alem_eval.envs.spaces import num_actions

    names = F.action_names(3, 4)
    assert [len(n) for n in names] == [num_actions(3, 4)] * 3
    assert names[0][0] == "NOOP" and names[0][5] == "DO"
    # GIVE slot k goes to the k-th other agent (the env's trade logic).
    assert [n[54:56] for n in names] == [
        ["GIVE->a1", "GIVE->a2"],
        ["GIVE->a0", "GIVE->a2"],
        ["GIVE->a0", "GIVE->a1"],
    ]
    assert names[2][56:] == ["COMM_0", "COMM_1", "COMM_2", "COMM_3"]
    assert len(F.achievement_names()) == 93


def test_algorithm_clips_render_the_first_cell_of_each_algorithm(monkeypatch, tmp_path):
    from alem_eval.hub.manifest import Cell

    calls = []
    monkeypatch.setattr(R, "render_episode", lambda src, team, **kw: calls.append((team, kw)))
    cells = [
        Cell("1B", "pqn-vdn-rnn", "hard", 1),
        Cell("1B", "ippo-rnn", "hard", 3),
        Cell("1B", "pqn-vdn-rnn", "hard", 0),
        Cell("1B", "ippo-rnn", "easy", 0),
    ]
    clips = R.algorithm_clips("source", cells, tmp_path / "clips", max_steps=30)
    assert list(clips) == ["ippo-rnn", "pqn-vdn-rnn"]
    assert [team for team, _ in calls] == ["1B/ippo-rnn/easy/seed0", "1B/pqn-vdn-rnn/hard/seed0"]
    assert [kw["out"] for _, kw in calls] == [
        tmp_path / "clips" / "ippo-rnn.gif",
        tmp_path / "clips" / "pqn-vdn-rnn.gif",
    ]
    assert all(kw["max_steps"] == 30 for _, kw in calls)


def test_default_output_names_every_slot():
    from alem_eval.hub.manifest import Cell

    a, b = Cell("demo", "ippo-rnn", "easy", 0), Cell("demo", "pqn-vdn-rnn", "easy", 0)
    assert str(R.default_out([a], "easy", 3)) == "render-demo-ippo-rnn-easy-seed0-easy-ep3.gif"
    assert str(R.default_out([a, b, a], "hard", 0)) == (
        "render-demo-ippo-rnn-easy-seed0+demo-pqn-vdn-rnn-easy-seed0"
        "+demo-ippo-rnn-easy-seed0-hard-ep0.gif"
    )
