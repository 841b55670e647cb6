"""Ways of playing on top of the play core: score, compare, cross-play, scenarios, dry-run plans.

``play`` is the one pipeline of team play (worlds, keys, read back, one call of the play
core, each team stored as it ends, in the results store); ``teams`` (who plays which slot,
cross-play's schemes) and ``scenario`` (a focal agent's placements) build the teams it
plays; ``crossplay`` and ``scenario`` turn the scores into their statistics;
``crossplay_outputs`` writes cross-play's JSON, CSV and heatmap files."""
