"""The environment layer of alem-eval: builds Alem (the PyPI package ``alem-env==0.1.0``,
import name ``alem``) exactly as upstream's evaluation does. Nothing of the game is
re-implemented here; importing this package does not import ``alem`` (which is slow and
prints to stdout): use :func:`alem_eval.envs.loader.import_alem`.
"""

from alem_eval.envs.spaces import num_actions, obs_dim

__all__ = ["num_actions", "obs_dim"]
