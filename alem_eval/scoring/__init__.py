"""Ways of playing on top of the play core: score, compare, cross-play, dry-run plans."""
