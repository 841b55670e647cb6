"""The released layout: the manifest, selectors, sources (the Hub, local directories, the bundled demo cells) and writing cells in that layout.

- ``layout``, ``manifest``, ``selectors``: the on-disk layout, the released cells, selecting them.
- ``source_base``: the :class:`~alem_eval.hub.source_base.Source` interface and ``PullReport``
  (what the implementations import); ``sources``: ``open_source``, the registry of source kinds.
- ``local``: a directory in the released layout; ``hubsource``: the Hugging Face Hub release.
- ``listing``: the Hub file listing and its cache; ``transfer``: downloading and checking files
  (reported to a ``DownloadProgress``: sources draw nothing); ``client``: the huggingface_hub
  client (floor, errors); ``state``: the JSON state files (verified markers, pulled commits).
- ``released``: writing cells in the released format; ``demo_cells``: the bundled demo cells.
- ``splits``: the frozen partner splits (train / val / test seeds per population; the
  release's ship beside the manifest, a user's own file is read the same way).
"""
