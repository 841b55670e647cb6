"""``alem-eval dataset info``: a description of a recording, a vault or a directory of
vaults, in plain JSON types (:func:`dataset_info`).

A recording is described from its ``episode.json`` files and sizes on disk (episodes per
team, complete and incomplete, steps, shapes, dtypes, return distribution); a vault from
flashbax's ``metadata.json``, the vault itself (opened with flashbax, imported only then)
and its dataset card.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

from alem_eval.core.errors import DatasetError
from alem_eval.core.extras import require
from alem_eval.datasets.card import distribution
from alem_eval.datasets.format import FIELDS, FORMAT, RECORDING_FILE, VERSION, why
from alem_eval.datasets.reader import Recording, open_recording
from alem_eval.datasets.vault import flat_items


def dataset_info(path: str | os.PathLike) -> dict[str, Any]:
    """What ``alem-eval dataset info`` shows (plain JSON types): for a recording
    directory (``kind: "recording"``) its episodes per team, complete and incomplete,
    steps, shapes, dtypes and bytes on disk; for a vault (``kind: "vault"``) its card,
    structure and size; for a directory holding vaults (``kind: "vaults"``) each of them."""
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"no such directory: {root}")
    if not root.is_dir():
        raise DatasetError(f"{root} is not a directory")
    if (root / RECORDING_FILE).is_file():
        return _recording_info(open_recording(root))
    if _is_vault(root):
        return _vault_info(root)
    vaults = sorted(
        m.parent
        for m in root.rglob("metadata.json")
        if _is_vault(m.parent) and not _hidden(m.parent.relative_to(root))
    )
    if vaults:
        return {"kind": "vaults", "path": str(root), "vaults": [_vault_info(v) for v in vaults]}
    raise DatasetError(
        f"{root} is neither an alem-eval recording (no {RECORDING_FILE}) nor a Flashbax "
        "vault (no metadata.json)"
    )


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _recording_info(rec: Recording) -> dict[str, Any]:
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}

    def group(ep_path: Path) -> dict[str, Any]:
        rel = ep_path.relative_to(rec.root).parts
        key = (rel[0], rel[1] if len(rel) > 2 else "", "/".join(rel[2:-1]))
        return groups.setdefault(
            key,
            {
                "protocol": key[0],
                "eval_difficulty": key[1],
                "team": key[2],
                "slots": None,
                "episodes": 0,
                "incomplete": 0,
                "steps": 0,
                "bytes": 0,
                "observation_dtypes": {},
                "episode_return": None,
                "_returns": [],
            },
        )

    shapes: dict[str, Any] = {}
    for ep in rec.complete:
        g = group(ep.path)
        g["slots"] = list(ep.team)
        g["episodes"] += 1
        g["steps"] += ep.length
        g["bytes"] += _dir_bytes(ep.path)
        g["_returns"].append(float(ep.meta["episode_return"]))
        for part in ep.meta["parts"]:
            dt = part["observations_dtype"]
            if part.get("observations_wide_columns"):
                dt += "+float32 columns"
            g["observation_dtypes"][dt] = g["observation_dtypes"].get(dt, 0) + 1
        if not shapes:
            shapes = {
                k: {"shape": ["T", *ep.meta["shapes"][k][1:]], "dtype": ep.meta["dtypes"][k]}
                for k in FIELDS
            }
    for inc in rec.incomplete:
        g = group(inc.path)
        g["incomplete"] += 1
        g["bytes"] += _dir_bytes(inc.path)
    for g in groups.values():
        g["episode_return"] = distribution(g.pop("_returns"))
    rows = [groups[k] for k in sorted(groups)]
    return {
        "kind": "recording",
        "path": str(rec.root),
        "format": FORMAT,
        "version": VERSION,
        "complete_episodes": len(rec.complete),
        "incomplete_episodes": len(rec.incomplete),
        "steps": sum(e.length for e in rec.complete),
        "bytes": _dir_bytes(rec.root),
        "arrays": shapes,
        "teams": rows,
        "incomplete": [
            {"path": str(i.path.relative_to(rec.root)), "reason": i.reason} for i in rec.incomplete
        ],
    }


def _hidden(rel: Path) -> bool:
    """A path below a dot-directory (a staging area, a killed export's leftovers)."""
    return any(part.startswith(".") for part in rel.parts)


def _is_vault(path: Path) -> bool:
    try:
        meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "structure_shape" in meta and "structure_dtype" in meta


def _vault_info(path: Path) -> dict[str, Any]:
    require("flashbax", f"reading the vault {path}")
    from flashbax.vault import Vault

    meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            vault = Vault(
                vault_name=path.parent.name,
                rel_dir=str(path.parent.parent.resolve()),
                vault_uid=path.name,
            )
    except Exception as exc:  # tensorstore raises its own errors for a damaged vault
        raise DatasetError(f"{path}: cannot open the vault ({why(exc)})") from None
    steps = int(vault.vault_index)
    structure = {}
    for (key, shape), (_, dtype) in zip(
        flat_items(meta["structure_shape"]), flat_items(meta["structure_dtype"])
    ):
        dims = [int(x) for x in shape.strip("()").split(",") if x.strip()]
        structure[key] = {"shape": [dims[0], steps, *dims[2:]], "dtype": dtype}
    card = None
    if (path / "card.json").is_file():
        card = json.loads((path / "card.json").read_text(encoding="utf-8"))
    return {
        "kind": "vault",
        "path": str(path),
        "vault_name": path.parent.name,
        "vault_uid": path.name,
        "steps": steps,
        "bytes": _dir_bytes(path),
        "structure": structure,
        "card": card,
        # False when steps were appended after the export (flashbax's Vault.write): the
        # card then describes only the exported ones
        "card_matches": card is not None and card.get("steps") == steps,
    }
