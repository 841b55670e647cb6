"""Opening a checkpoint source by name: the registry of source kinds.

``open_source("hub")`` reads ``alem-world/alem-rl-baselines`` (endpoint from ``HF_ENDPOINT``,
cache in ``--cache-dir`` or the default Hugging Face cache: :mod:`alem_eval.hub.hubsource`);
``open_source(PATH)`` reads a directory laid out as
``<budget>/<algorithm>/<difficulty>/seed<N>/{checkpoint/,config.json}``
(:mod:`alem_eval.hub.local`); ``open_source("demo")`` the small cells bundled with the
package. What they share, :class:`~alem_eval.hub.source_base.Source` and
:class:`~alem_eval.hub.source_base.PullReport`, lives in :mod:`alem_eval.hub.source_base`,
which the implementations import (they never import this module).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from alem_eval.core.errors import UsageError
from alem_eval.hub.hubsource import HubSource
from alem_eval.hub.local import LocalSource
from alem_eval.hub.manifest import DEFAULT_REVISION, HUB_REPO

if TYPE_CHECKING:
    from alem_eval.hub.source_base import Source
    from alem_eval.hub.transfer import DownloadProgress

HUB_SPEC = "hub"
DEMO_SPEC = "demo"


def open_source(
    spec: str | Path = HUB_SPEC,
    *,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
    read_only: bool = False,
    on_download: DownloadProgress | None = None,
) -> Source:
    """``"hub"`` (the default), ``"demo"`` (the small trained cells bundled with the package,
    :mod:`alem_eval.api.demo`) or a local directory in the released layout (``./hub`` for a
    directory named ``hub``). ``read_only``: a Hub source never writes to its cache nor
    downloads (local directories are only read anyway). ``on_download``: told what every
    pull of the source downloads (:attr:`Source.on_download`; None: nothing is told)."""
    name = str(spec).strip().lower()
    if name == HUB_SPEC:
        return HubSource(
            repo=repo or HUB_REPO,
            revision=revision or DEFAULT_REVISION,
            cache_dir=cache_dir,
            endpoint=endpoint,
            read_only=read_only,
            on_download=on_download,
        )
    if repo is not None or revision is not None:
        raise UsageError(
            "--repo and --revision apply to the Hub source only, not to a local --source"
        )
    if name == DEMO_SPEC:
        from alem_eval.hub.demo_cells import ensure_demo_source

        return LocalSource(ensure_demo_source(), cache_dir=cache_dir, on_download=on_download)
    return LocalSource(Path(spec), cache_dir=cache_dir, on_download=on_download)
