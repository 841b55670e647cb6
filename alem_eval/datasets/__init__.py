"""Evaluation episodes as offline-MARL datasets (``score --record``, ``alem-eval dataset``).

Host-only numpy; JAX and flashbax (the ``datasets`` extra) are imported only by the
vaults' export and description. What is where:

* :mod:`~alem_eval.datasets.format`: the recording format (its spec is the module
  docstring): ``FORMAT``, ``VERSION``, file names, ``FIELDS``, ``EPISODE_META``, the
  layout (``team_path``, ``episode_dir``) and the observation codec (``inexact_columns``,
  ``choose_obs_dtype``, ``encode_observations``, ``decode_observations``,
  ``obs_dtype_join``, ``action_dtype``);
* :mod:`~alem_eval.datasets.recorder`: ``Recorder``, which writes a recording as the
  evaluator hands over steps (every step of every episode, in compressed ``.npz`` parts,
  an episode's ``episode.json`` written last as its commit marker);
* :mod:`~alem_eval.datasets.reader`: ``open_recording`` -> ``Recording`` (its complete
  episodes, ``EpisodeRecord``, and incomplete ones, ``IncompleteEpisode``),
  ``check_episode``;
* :mod:`~alem_eval.datasets.card`: dataset cards (``dataset_card`` is ``card.json``,
  ``card_markdown`` is ``card.md``, ``distribution``);
* :mod:`~alem_eval.datasets.vault`: Flashbax Vaults in the experience structure OG-MARL's
  loaders read (``export_vault`` -> ``VaultExport``, ``vault_groups``,
  ``vault_location``, ``VAULT_PER``, ``VAULT_FORMATS``);
* :mod:`~alem_eval.datasets.info`: ``dataset_info``, the description of a recording or a
  vault (``alem-eval dataset info``).
"""
