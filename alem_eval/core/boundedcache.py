"""A process-level cache of compiled programs that keeps only the most recently used.

A compiled program of the Alem step holds about half a gigabyte of host memory on a CPU
(its executable, traced program and buffers), and JAX frees it only when nothing refers to
the program. A notebook that scores selection after selection, or a test run that plays
dozens of shapes in one process, would otherwise keep every program it ever compiled
(measured: two 1-cell programs held 1.0 GB; a test worker grew past 11 GB). The programs it
forgets are not lost: a later call with the same shapes loads them from the persistent
compilation cache (and the warm-start store) instead of compiling again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A mapping that holds at most ``size`` values and forgets the least recently used.

    ``get_or_make(key, make)`` is the one way in: a hit moves the key to the recent end, a
    miss calls ``make()`` and may evict the oldest entry.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a bounded cache holds at least 1 value, not {size}")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
            return found
        value = make()
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def get(self, key: Hashable) -> V | None:
        return self._items.get(key)

    def items(self) -> list[tuple[Hashable, V]]:
        return list(self._items.items())

    def clear(self) -> None:
        self._items.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["BoundedCache"]
