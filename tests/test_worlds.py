"""The evaluation worlds as data (alem_eval.evaluate.worlds): reset once, kept on disk and
shipped for the demo cells, keyed by what makes them, never a wrong world."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alem_eval.envs.eval_env import EnvStatics
from alem_eval.evaluate import worlds
from tests.conftest import REPO

DEMO_WORLD = EnvStatics(
    env_name="Alem-Coop-Symbolic",
    num_agents=3,
    num_comm_channels=4,
    shared_reward=False,
    scale_base_difficulty=False,
    action_masking=False,
    append_agent_id=False,
)
EASY = {
    "p_max_agents": np.float32(0.0),  # placeholders: any values name a difficulty's worlds
    "soft_solo_fail_prob": np.float32(0.1),
}


class FakeReset:
    """Stands in for the reset program: a small world tree per key, counting calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, world, dyn, keys):
        k = np.stack([np.asarray(x) for x in keys]).astype(np.uint32)
        self.calls.append(len(k))
        obs = (np.arange(6).reshape(1, 2, 3) + k[:, 1:, None]).astype(np.float32)  # per key
        state = {"key": k, "level": (k[:, 1] % 7).astype(np.int32), "flag": k[:, 0] > 5}
        return obs, state


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.setenv("ALEM_EVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(worlds, "PACKAGE_DIR", tmp_path / "package")  # nothing shipped
    reset = FakeReset()
    monkeypatch.setattr(worlds, "reset_fresh", reset)
    return reset


def _keys(seeds) -> list[np.ndarray]:
    return [np.array([0, s], np.uint32) for s in seeds]


def _same(a, b) -> bool:
    import jax

    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(la, lb, strict=True)
    )


def test_worlds_are_reset_once_then_read_back_bitwise_and_keyed(fake, recwarn):
    first = worlds.fixed_worlds(DEMO_WORLD, EASY, _keys(range(9999, 10004)))
    assert fake.calls == [5]
    (path,) = worlds.cache_dir().glob(f"*{worlds.SUFFIX}")
    assert path.name.startswith(worlds.world_identity(DEMO_WORLD, EASY))
    again = worlds.fixed_worlds(DEMO_WORLD, EASY, _keys(range(9999, 10004)))
    assert fake.calls == [5] and _same(again, first)
    assert _same(again, fake(DEMO_WORLD, EASY, _keys(range(9999, 10004))))
    fake.calls.clear()
    # Any of the stored keys, in any order, are read back too (a call for fewer episodes,
    # the renderer's one episode); a key not stored, another difficulty or another world
    # are reset (and kept) on their own.
    for seeds in (range(9999, 10002), [10003], [10001, 9999]):
        some = worlds.fixed_worlds(DEMO_WORLD, EASY, _keys(seeds))
        assert _same(some, fake(DEMO_WORLD, EASY, _keys(seeds)))
    assert fake.calls == [3, 1, 2]  # (the fake's own calls, for the expected worlds)
    fake.calls.clear()
    worlds.fixed_worlds(DEMO_WORLD, EASY, _keys(range(10003, 10005)))  # 10004 is not stored
    hard = {**EASY, "p_max_agents": np.float32(0.5)}
    worlds.fixed_worlds(DEMO_WORLD, hard, _keys(range(9999, 10002)))
    other = dataclasses.replace(DEMO_WORLD, shared_reward=True)
    worlds.fixed_worlds(other, EASY, _keys(range(9999, 10002)))
    assert fake.calls == [2, 3, 3]
    idents = {worlds.world_identity(DEMO_WORLD, EASY), worlds.world_identity(DEMO_WORLD, hard)}
    assert len(idents | {worlds.world_identity(other, EASY)}) == 3
    assert len(list(worlds.cache_dir().glob(f"*{worlds.SUFFIX}"))) == 4
    assert not [w for w in recwarn if issubclass(w.category, worlds.WorldCacheWarning)]


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "other-identity"])
def test_a_damaged_world_file_is_ignored_with_one_warning_and_made_again(fake, damage):
    keys = _keys(range(9999, 10003))
    want = worlds.fixed_worlds(DEMO_WORLD, EASY, keys)
    (path,) = worlds.cache_dir().glob(f"*{worlds.SUFFIX}")
    raw = path.read_bytes()
    if damage == "flip":  # a valid LZMA stream whose contents changed: the digest catches it
        import lzma

        payload = bytearray(lzma.decompress(raw[len(worlds.MAGIC) :]))
        payload[-3] ^= 0xFF
        path.write_bytes(worlds.MAGIC + lzma.compress(bytes(payload)))
    elif damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\0" * 100)
    else:  # a file of other worlds under this name
        other = worlds.world_identity(dataclasses.replace(DEMO_WORLD, shared_reward=True), EASY)
        worlds.write_worlds(path, other, np.stack(keys), fake(DEMO_WORLD, EASY, keys))
    fake.calls.clear()
    with pytest.warns(worlds.WorldCacheWarning, match="ignored") as caught:
        got = worlds.fixed_worlds(DEMO_WORLD, EASY, keys)
    assert len([w for w in caught if issubclass(w.category, worlds.WorldCacheWarning)]) == 1
    assert fake.calls == [4] and _same(got, want)
    # made again: the next call reads it, without a warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", worlds.WorldCacheWarning)
        assert _same(worlds.fixed_worlds(DEMO_WORLD, EASY, keys), want)
    assert fake.calls == [4]


def _script():
    """scripts/make_world_data.py, loaded from its path (a script, not an installed module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_world_data", REPO / "scripts" / "make_world_data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_ships_the_demo_worlds_for_this_installation():
    """The shipped file is the one this installation looks for (the demo cells' world on
    easy, the fast protocol's first 20 worlds): a cold demo call resets nothing."""
    shipped_settings = _script().shipped_settings
    world, dyn, keys = shipped_settings()
    assert world == DEMO_WORLD and len(keys) == 20
    ident = worlds.world_identity(world, dyn)
    (path,) = worlds.PACKAGE_DIR.glob(f"{ident}-*{worlds.SUFFIX}")
    stored = worlds.read_worlds(path, ident)
    assert stored is not None and np.array_equal(stored[0], keys)
    assert path.stat().st_size < 200_000  # package data stays small


@pytest.mark.slow
def test_the_shipped_worlds_are_bitwise_a_fresh_reset(monkeypatch, tmp_path):
    """Worlds as data equal the reset program's worlds, leaf for leaf, byte for byte (the
    demo world's reset program: the one test_scenario's host-agent test compiles)."""
    shipped_settings = _script().shipped_settings
    monkeypatch.setenv("ALEM_EVAL_CACHE", str(tmp_path))
    world, dyn, keys = shipped_settings()
    shipped = worlds.fixed_worlds(world, dyn, list(keys[:8]))  # the demo's 8 episodes
    assert not list(tmp_path.rglob(f"*{worlds.SUFFIX}"))  # read from the package
    assert _same(shipped, worlds.reset_fresh(world, dyn, list(keys[:8])))
