"""alem's texture table is read when first drawn, not at ``import alem``
(:mod:`alem_eval.envs.textures`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from .conftest import REPO

_FRESH = textwrap.dedent("""
    import json, time
    from alem_eval.envs.loader import IMPORT_MESSAGES, import_alem
    import_alem()
    import alem.alem_coop.constants as c
    import alem.environment_base.util as util
    lazy = c.TEXTURES
    out = {"kind": type(lazy).__name__, "loaded_after_import": lazy.loaded,
           "loader_restored": util.load_compressed_pickle.__qualname__,
           "messages": IMPORT_MESSAGES}
    sizes = sorted(lazy)  # the first read loads the table
    eager = util.load_compressed_pickle(c.TEXTURE_CACHE_FILE)  # alem's own read of it
    out.update(sizes=sizes, loaded=lazy.loaded, valid=bool(c._cache_is_valid(lazy)),
               same_keys=all(sorted(lazy[s]) == sorted(eager[s]) for s in eager),
               same_pixels=bool((lazy[16]["full_map_block_textures"]
                                 == eager[16]["full_map_block_textures"]).all()))
    print("RESULT" + json.dumps(out))
""")


def test_a_fresh_import_reads_the_texture_table_on_first_use_and_it_is_alems_own():
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    out = json.loads(line[len("RESULT") :])
    assert out["kind"] == "LazyTextures" and out["loaded_after_import"] is False
    assert out["loader_restored"] == "load_compressed_pickle"  # alem's loader is its own again
    assert out["sizes"] == [10, 16, 64] and out["loaded"] is True and out["valid"] is True
    assert out["same_keys"] and out["same_pixels"]


def test_an_alem_already_imported_is_left_as_it_is():
    from alem_eval.envs.loader import import_alem
    from alem_eval.envs.textures import deferred_textures

    modules = import_alem()
    with deferred_textures(modules.package_version) as handed:
        assert handed == []


def test_a_lazy_table_answers_nothing_during_the_import_and_reads_once_after():
    from alem_eval.envs.textures import LazyTextures

    reads = []

    def load():
        reads.append(1)
        return {16: {"a": 1}}

    lazy = LazyTextures(load)
    assert list(lazy.values()) == [] and not reads  # alem's import-time check reads nothing
    lazy.imported()
    assert list(lazy.values()) == [{"a": 1}] and lazy[16] == {"a": 1} and len(lazy) == 1
    assert reads == [1]
