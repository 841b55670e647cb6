"""The play core: teams of policies in compiled, batched rollouts of the Alem env."""
