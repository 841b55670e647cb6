"""``--shard i/N`` (score and train): N shares that partition a selection exactly."""

from __future__ import annotations

import pytest

from alem_eval.core.errors import UsageError
from alem_eval.hub.manifest import Cell
from alem_eval.hub.selectors import parse_shard, shard_cells


@pytest.mark.parametrize("count, n", [(120, 7), (5, 8), (1, 1), (40, 40), (0, 3)])
def test_shards_partition_the_selection_exactly(count, n):
    cells = [Cell("1B", "ippo-rnn", "hard", s) for s in range(count)]
    shares = [shard_cells(cells, (i, n)) for i in range(n)]
    assert [c for share in shares for c in share] == cells  # every cell once, in order
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # balanced


@pytest.mark.parametrize("text", ["3", "a/b", "2/2", "-1/4", "0/0", "1/2/3"])
def test_bad_shard_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--shard"):
        parse_shard(text)


def test_shard_text_parses():
    assert parse_shard("0/8") == (0, 8) and parse_shard("7/8") == (7, 8)
    assert parse_shard(None) is None
