"""Ways of playing on top of the play core: score, compare, cross-play, dry-run plans.

Cross-play is four modules: ``teams`` (who plays which slot, the schemes), ``crossplay``
(scoring the teams, the pair matrix, the gap), ``crossplay_store`` (the rows kept under
``<results>/crossplay/``) and ``crossplay_outputs`` (the JSON, CSV and heatmap files)."""
