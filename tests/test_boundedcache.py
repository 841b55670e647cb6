"""core.boundedcache: a process keeps only its most recently used compiled programs."""

from __future__ import annotations

import pytest

from alem_eval.core.boundedcache import BoundedCache


def test_the_least_recently_used_value_is_forgotten_past_the_size():
    cache: BoundedCache[str] = BoundedCache(2)
    made: list[str] = []

    def make(key: str):
        return lambda: made.append(key) or key.upper()

    assert cache.get_or_make("a", make("a")) == "A"
    assert cache.get_or_make("b", make("b")) == "B"
    assert cache.get_or_make("a", make("a")) == "A"  # a hit: "a" is now the most recent
    assert cache.get_or_make("c", make("c")) == "C"  # forgets "b", the least recent
    assert list(cache) == ["a", "c"] and len(cache) == 2
    assert "b" not in cache and cache.get("b") is None
    assert cache.get_or_make("b", make("b")) == "B"  # made again
    assert made == ["a", "b", "c", "b"]
    cache.clear()
    assert len(cache) == 0


def test_a_cache_holds_at_least_one_value():
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache(0)


def test_the_process_caches_of_compiled_programs_are_bounded():
    from alem_eval.evaluate import programs
    from alem_eval.evaluate.settings import MAX_PROGRAMS
    from alem_eval.trainers import common

    assert programs._PROGRAMS.size == MAX_PROGRAMS
    assert common._TRAINERS.size == common.MAX_TRAINERS
