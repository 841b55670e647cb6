"""Observation and action widths of Alem-Coop-Symbolic as functions of the statics.

These let alem-eval validate checkpoint shapes without importing the environment (which
takes seconds). :mod:`alem_eval.envs.eval_env` checks the action count against the installed
environment whenever it builds one; ``tests/test_public_api.py`` checks the observation width
against an episode of it.
"""

from __future__ import annotations

# Per spec §4: a 9x11 local view of 99 cells with (P + 94) channels each, a dashboard of
# (22 + nc) values per player and a 49-value inventory block.
_VIEW_CELLS = 99
_CELL_CHANNELS_BASE = 94
_DASHBOARD_BASE = 22
_INVENTORY = 49
# 55 actions for one or two players, one GIVE slot per extra teammate, then comm actions.
_BASE_ACTIONS = 55


def obs_dim(num_agents: int, num_comm_channels: int) -> int:
    """Width of one agent's raw observation vector."""
    return (
        _VIEW_CELLS * (num_agents + _CELL_CHANNELS_BASE)
        + num_agents * (_DASHBOARD_BASE + num_comm_channels)
        + _INVENTORY
    )


def num_actions(num_agents: int, num_comm_channels: int) -> int:
    """Number of discrete actions per agent."""
    return _BASE_ACTIONS + max(0, num_agents - 2) + num_comm_channels
