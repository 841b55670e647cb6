"""Dataset cards: what a set of recorded episodes holds, for machines and for people.

:func:`dataset_card` computes ``card.json`` from the episodes' ``episode.json`` alone
(source cells, teams, protocol, versions, shapes, episode and step counts, return /
length / achievement :func:`distribution`, observation dtypes); :func:`card_markdown`
renders it as ``card.md``, with the code that loads the vault when the card names one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError
from alem_eval.datasets.format import obs_dtype_join
from alem_eval.datasets.reader import EpisodeRecord

CARD_FORMAT = "alem-eval-dataset-card"


def distribution(values: Sequence[float]) -> dict[str, float] | None:
    """mean, std (population), min, quartiles, max of ``values`` (None when empty)."""
    if len(values) == 0:
        return None
    x = np.asarray(values, np.float64)
    q25, q50, q75 = np.percentile(x, [25, 50, 75])
    return {
        "mean": float(x.mean()),
        "std": float(x.std()),
        "min": float(x.min()),
        "q25": float(q25),
        "median": float(q50),
        "q75": float(q75),
        "max": float(x.max()),
    }


def dataset_card(
    episodes: Sequence[EpisodeRecord],
    *,
    name: str,
    observation_dtype: str | None = None,
    vault: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The dataset card of ``episodes`` (what ``card.json`` holds), computed from their
    ``episode.json``: source cells, teams, protocol, env version, eval difficulty, episodes
    and steps, return / length / achievement distributions, observation dtypes."""
    from alem_eval.core.version import __version__

    if not episodes:
        raise DatasetError(f"{name}: no complete episodes")
    metas = [e.meta for e in episodes]

    def one(key: str) -> Any:
        values = sorted({str(m[key]) for m in metas})
        return values[0] if len(values) == 1 else values

    first = metas[0]
    for k in ("num_agents", "obs_dim", "num_actions"):
        if any(m[k] != first[k] for m in metas):
            raise DatasetError(f"{name}: episodes differ in {k}; they cannot share a dataset")
    teams = list(dict.fromkeys(e.team for e in episodes))
    part_dtypes = Counter(
        "float32" if p.get("observations_wide_columns") else p["observations_dtype"]
        for m in metas
        for p in m["parts"]
    )
    stored = Counter(p["observations_dtype"] for m in metas for p in m["parts"])
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "version": 1,
        "name": name,
        "source_cells": sorted({c for t in teams for c in t}),
        "teams": [
            {"slots": list(t), "episodes": sum(e.team == t for e in episodes)} for t in teams
        ],
        "protocol": one("protocol"),
        "eval_difficulty": one("eval_difficulty"),
        "env_version": one("env_version"),
        "alem_eval_version": __version__,
        "recorded_with_alem_eval": one("alem_eval_version"),
        "num_agents": int(first["num_agents"]),
        "obs_dim": int(first["obs_dim"]),
        "num_actions": int(first["num_actions"]),
        "episodes": len(metas),
        "steps": int(sum(m["length"] for m in metas)),
        "terminated_episodes": int(sum(bool(m["terminated"]) for m in metas)),
        "episode_return": distribution([float(m["episode_return"]) for m in metas]),
        "episode_length": distribution([float(m["length"]) for m in metas]),
        "final_achievements": distribution([float(m["final_achievements"]) for m in metas]),
        "observation_dtype": observation_dtype or obs_dtype_join(part_dtypes),
        "recorded_observation_dtypes": dict(sorted(stored.items())),
        "episode_list": [
            {
                "team": list(e.team),
                "episode": e.episode,
                "world_key": list(e.meta["world_key"]),
                "step_key": list(e.meta["step_key"]),
                "length": e.length,
                "terminated": bool(e.meta["terminated"]),
                "episode_return": float(e.meta["episode_return"]),
                "final_achievements": int(e.meta["final_achievements"]),
            }
            for e in episodes
        ],
    }
    if vault is not None:
        card["vault"] = dict(vault)
    return card


def card_markdown(card: Mapping[str, Any]) -> str:
    """``card.md``: the card for people."""

    def dist(d: Mapping[str, float] | None) -> str:
        if not d:
            return "-"
        return (
            f"mean {d['mean']:.4g}, std {d['std']:.4g}, min {d['min']:.4g}, "
            f"quartiles {d['q25']:.4g} / {d['median']:.4g} / {d['q75']:.4g}, max {d['max']:.4g}"
        )

    lines = [
        f"# Alem offline-MARL dataset: {card['name']}",
        "",
        "Greedy evaluation episodes of trained Alem policies, recorded by alem-eval "
        "(`alem-eval score --record`) and exported with `alem-eval dataset export`.",
        "",
        "| | |",
        "| --- | --- |",
        f"| source cells | {', '.join(f'`{c}`' for c in card['source_cells'])} |",
        f"| teams | {len(card['teams'])} |",
        f"| protocol | {card['protocol']} |",
        f"| eval difficulty | {card['eval_difficulty']} |",
        f"| env version | {card['env_version']} |",
        f"| alem-eval version | {card['alem_eval_version']} |",
        f"| agents / obs dim / actions | {card['num_agents']} / {card['obs_dim']} / "
        f"{card['num_actions']} |",
        f"| episodes (terminated) | {card['episodes']} ({card['terminated_episodes']}) |",
        f"| steps | {card['steps']} |",
        f"| episode return | {dist(card['episode_return'])} |",
        f"| episode length | {dist(card['episode_length'])} |",
        f"| final team achievements | {dist(card['final_achievements'])} |",
        f"| observation dtype | {card['observation_dtype']} (exact; cast to float32 to use) |",
    ]
    vault = card.get("vault")
    if vault:
        # older cards have no rel_dir: the directory holding the .vlt directory
        rel_dir = vault.get("rel_dir") or f"<the directory holding {vault['vault_name']}>"
        where_from = (
            "the directory holding this vault's `.vlt` directory, as `dataset export` was "
            "given it (relative to where it ran, unless absolute)"
        )
        lines += [
            "",
            "## Loading",
            "",
            "```python",
            "from flashbax.vault import Vault",
            f'vault = Vault(vault_name="{vault["vault_name"]}", vault_uid="{vault["vault_uid"]}",',
            f'              rel_dir="{rel_dir}")',
            "experience = vault.read().experience  # OG-MARL's structure: [1, T, ...]",
            "```",
            "",
            f"`rel_dir` is {where_from}.",
            "",
            "| key | shape | dtype |",
            "| --- | --- | --- |",
        ]
        for key, spec in vault["structure"].items():
            lines.append(f"| `{key}` | {spec['shape']} | {spec['dtype']} |")
        lines += [
            "",
            "Episodes follow each other on the time axis in the order of `episode_list` in "
            "card.json; the last step of each has `terminals` (the env ended it) or "
            "`truncations` (the step cap) set for every agent. Evaluation episodes often "
            "end at the cap, so split episodes on both: OG-MARL's `og_marl.vault_utils` "
            'take `done_flags=("terminals", "truncations")` (their default, '
            "`terminals` alone, merges a capped episode into the next).",
            "",
            "`rewards` are each agent's own reward. The episode return above is the sum "
            "over steps of the mean over agents (the team's reward); OG-MARL's return "
            "utilities (`calculate_returns`, `describe_episode_returns`) read agent 0's "
            "reward, which differs unless the env shares its reward.",
        ]
    return "\n".join(lines) + "\n"
