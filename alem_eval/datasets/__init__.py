"""Episode recordings (--record) and their export as Flashbax Vaults."""
