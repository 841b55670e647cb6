"""Networks, greedy policies, checkpoints (shape checks before restoring) and loading a cell's weights."""
