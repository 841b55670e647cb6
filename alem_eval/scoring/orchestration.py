"""The one orchestration under every way of playing: matches in, stored episodes out.

A way of playing is a team builder: it resolves the cells it plays (:class:`Member`), draws
its teams and says, per team, where its episodes are kept -- a :class:`Match`: the team,
its eval difficulty and episode settings, its results-store key, what its recorded
episodes name and the metadata stored beside its rows -- and hands them to
:func:`play_matches`, which does the rest once for all of them:

1. read back: a match the results store holds under its key (and, when recording, whose
   episodes are all recorded as this run would record them) is not played again;
2. stacks: the others are grouped by eval difficulty and episode settings and cut into
   stacks (at most ``max_stack`` teams each, or one per group) that share ONE structure
   across the groups (:func:`stacks`: padded with unreported copies), so one compiled
   program plays them all whatever their difficulties;
3. play: per stack, the cells it uses are loaded (and kept while a later stack pads with
   them) and every team plays in one call of the play core
   (:func:`alem_eval.evaluate.rollout.run_teams`, or
   :func:`~alem_eval.evaluate.agent_runs.run_agent_teams` when an agent drives some
   slots);
4. hand out: what the run makes goes to its sinks (:class:`Sink`), each the same way:
   the results store (:class:`StoreSink`: each match's episodes as soon as its last
   episode ends, so a run killed part-way keeps every match that finished), the
   recording of every step (:class:`RecordingSink`, ``--record``), progress
   (:class:`ProgressSink`: the callbacks) and any sink a caller adds (``sinks=``).

``score`` builds self-play matches (:mod:`alem_eval.scoring.score`); ``crossplay`` and
``scenario`` build teams (:func:`alem_eval.scoring.play.play_teams`); a new way of playing
is one more builder (CONTRACTS.md, "Where a change goes").
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from alem_eval.core.errors import DatasetError, UsageError
from alem_eval.scoring.teams import Team


@dataclass(frozen=True)
class Member:
    """A resolved cell a team can name by id: the manifest cell, its directory, config and
    network spec."""

    cell: Any
    cell_dir: Path
    cfg: Any
    spec: Any


@dataclass(frozen=True, eq=False)
class Match:
    """One team to play: ``team.slots`` name members (cell ids) or agents (their labels);
    ``key`` (a :class:`~alem_eval.analysis.result_keys.ResultKey`) is where the results
    store keeps its episodes; ``producer`` is what its recorded episodes name
    (:mod:`alem_eval.core.producers`); ``extra`` is stored beside its rows."""

    team: Team
    key: Any
    eval_difficulty: str
    num_episodes: int
    max_steps: int
    producer: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] | None = None
    first_episode: int = 0  # fast: its episode e is the protocol's first_episode + e

    @property
    def name(self) -> str:
        """How messages name it: the cell of a self-play team, else its slots."""
        return self.team.slots[0] if self.team.is_self_play else self.team.label()


@dataclass(frozen=True)
class Outcome:
    """What :func:`play_matches` returns: each match's episodes (the order given), which of
    them were read back, the env steps the played stacks ran and the seconds they took."""

    episodes: dict[Match, tuple[dict[str, float], ...]]
    reused: frozenset[Match]
    live_steps: int
    seconds: float


class RecordingWarning(UserWarning):
    """``--record`` found episodes of a team recorded by another checkpoint, config, step
    cap, protocol or env version: it records them again."""


class Sink(Protocol):
    """Where a run hands out what it makes (:func:`play_matches`): ONE interface for the
    results store, the recording, progress and any caller's own. Subclass it and override
    what you need: every method does nothing by default.

    In order: ``holds(match)`` for each match the results store holds (False: the sink
    lacks some of it, so it plays again); ``begin(lineup)`` once, before anything plays;
    per call of the play core (a stack) ``recorder(eval_difficulty)`` (an object with
    ``add_steps`` / ``finish_episode``, :class:`alem_eval.datasets.recorder.Recorder`'s
    calls, that gets every step played; None: none), ``match_done(match, episodes)`` as
    each match's last episode ends, ``progress(RolloutProgress)`` after every compiled
    call, ``note(line)`` for lines worth telling and ``played(result)`` with the call's
    :class:`~alem_eval.evaluate.rollout.StackResult`; ``end()`` once, last (also when the
    run stops on an error)."""

    def holds(self, match: Match) -> bool:
        return True

    def begin(self, lineup: Lineup) -> None:
        return None

    def recorder(self, eval_difficulty: str) -> Any:
        return None

    def match_done(self, match: Match, episodes: tuple[dict[str, float], ...]) -> None:
        return None

    def progress(self, progress: Any) -> None:
        return None

    def note(self, line: str) -> None:
        return None

    def played(self, result: Any) -> None:
        return None

    def end(self) -> None:
        return None


@dataclass(frozen=True, eq=False)
class Lineup:
    """What a run plays (:meth:`Sink.begin`): every match in the order given, and those
    read back from the results store with their episodes."""

    matches: tuple[Match, ...]
    read_back: Mapping[Match, tuple[dict[str, float], ...]]

    @property
    def to_play(self) -> list[Match]:
        return [m for m in self.matches if m not in self.read_back]


def play_matches(
    members: Mapping[str, Member],
    matches: Sequence[Match],
    *,
    protocol: str,
    agents: Mapping[str, Any] | None = None,
    store=None,
    fresh: bool = False,
    batch: int | None = None,
    max_stack: int | None = None,
    record_dir: Path | None = None,
    sinks: Sequence[Sink] = (),
    on_read_back: Callable[[int, int], None] | None = None,
    on_stored: Callable[[Match, int], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> Outcome:
    """Play ``matches`` over ``members`` (by cell id) and ``agents`` (by label: an
    :class:`~alem_eval.evaluate.actors.Actor` each); see the module docstring.

    ``store``: matches it holds are read back (``fresh``: none is), the others written as
    each one ends (:class:`StoreSink`). ``record_dir``: every played step is recorded there
    (:class:`RecordingSink`); a match stored but not completely recorded plays again.
    ``max_stack``: teams per evaluator call (None: a group's teams in one call).
    ``sinks``: more :class:`Sink` s, after those. The callbacks are the
    :class:`ProgressSink`: ``on_read_back(read back, to play)`` once; ``on_stored(match,
    matches done)`` per match played; ``on_episodes(RolloutProgress)`` as episodes end;
    ``on_note(line)`` lines worth telling. A recording that fails raises
    :class:`DatasetError` once the scores of the stack being played are saved."""
    from alem_eval.analysis.result_keys import episode_records

    agents = dict(agents or {})
    every: list[Sink] = [
        *([StoreSink(store)] if store is not None else []),
        *([RecordingSink(record_dir, protocol)] if record_dir is not None else []),
        ProgressSink(on_read_back, on_stored, on_episodes, on_note),
        *sinks,
    ]
    done: dict[Match, tuple[dict[str, float], ...]] = {}
    try:
        for m in matches:
            frame = store.get(m.key) if store is not None and not fresh else None
            if frame is not None and all(s.holds(m) for s in every):
                done[m] = tuple(episode_records(frame))
        lineup = Lineup(tuple(matches), dict(done))
        for s in every:
            s.begin(lineup)
        live, seconds = 0, 0.0
        if lineup.to_play:

            def finished(m: Match, episodes: list[dict[str, float]]) -> None:
                """A match whose episodes all ended: to every sink at once, on its own."""
                done[m] = tuple(episodes)
                for s in every:
                    s.match_done(m, done[m])

            t0 = time.perf_counter()
            live = _play(members, lineup.to_play, agents, protocol=protocol, batch=batch,
                         max_stack=max_stack, sinks=every, finished=finished)  # fmt: skip
            seconds = time.perf_counter() - t0
    finally:
        for s in every:
            s.end()
    reused = frozenset(lineup.read_back)
    return Outcome({m: done[m] for m in matches}, reused, live, seconds)


def _play(
    members: Mapping[str, Member],
    todo: Sequence[Match],
    agents: Mapping[str, Any],
    *,
    protocol: str,
    batch: int | None,
    max_stack: int | None,
    sinks: Sequence[Sink],
    finished: Callable[[Match, list[dict[str, float]]], None],
) -> int:
    """Play ``todo`` stack by stack, each match to ``finished`` as it ends -> the env
    steps run."""
    from alem_eval.evaluate.agent_runs import run_agent_teams
    from alem_eval.evaluate.rollout import RolloutProgress, run_teams
    from alem_eval.model.loader import load_cell

    groups: dict[tuple, list[Match]] = defaultdict(list)
    for m in todo:
        groups[(m.eval_difficulty, m.num_episodes, m.max_steps, m.first_episode)].append(m)
    families: dict[tuple, list[list[Match]]] = defaultdict(list)
    for group in groups.values():
        families[_family(members, group[0])].append(group)

    def shape(m: Match) -> tuple:
        return _shape(members, agents, m)

    plan = [sp for fam in families.values() for sp in stacks(fam, max_stack, shape)]
    episodes_total = sum(len(stack) * stack[0].num_episodes for stack, _ in plan)
    ran = {"episodes": 0, "steps": 0}
    clock = time.perf_counter()

    def progress(p: RolloutProgress) -> None:
        whole = RolloutProgress(
            ran["episodes"] + p.episodes_done,
            episodes_total,
            ran["steps"] + p.live_steps,
            time.perf_counter() - clock,
        )
        for s in sinks:
            s.progress(whole)

    def note(line: str) -> None:
        for s in sinks:
            s.note(line)

    cells = {c for _, padded in plan for m in padded for c in m.team.slots if c in members}
    last_use = {c: n for n, (_, padded) in enumerate(plan) for m in padded for c in m.team.slots}
    loaded: dict[str, Any] = {}  # a cell loaded, kept while a later stack uses it
    for n, (stack, padded) in enumerate(plan):
        first = {id(m): k for k, m in reversed(list(enumerate(padded)))}
        real = {first[id(m)] for m in stack}  # the rest repeats a match, maybe of another stack
        pads = [k for k in range(len(padded)) if k not in real]
        used = {c for m in padded for c in m.team.slots}
        # the stack's cells in the members' order, then its agents
        names = [c for c in members if c in used] + [a for a in agents if a in used]
        for c in names:
            if c in cells and c not in loaded:
                cell = members[c].cell
                loaded[c] = load_cell(
                    members[c].cell_dir,
                    algorithm=cell.algorithm,
                    difficulty=cell.difficulty,
                    seed=cell.seed,
                    policy_only=True,
                    where=cell.id,
                )
        own = {c for m in stack for c in m.team.slots}
        key_chain = next(loaded[c].cfg for m in stack for c in m.team.slots if c in loaded)
        env = next(loaded[c].cfg for c in names if c in loaded)  # (the first cell's, as ever)
        cfgs = [
            # an agent plays in the stack's env; padding from another stack where this one does
            env
            if c in agents
            else loaded[c].cfg
            if c in own
            else _as_padding(loaded[c].cfg, key_chain)
            for c in names
        ]
        weights = [None if c in agents else loaded[c].weights for c in names]
        index = {c: i for i, c in enumerate(names)}
        slots = [tuple(index[c] for c in m.team.slots) for m in padded]
        head = stack[0]
        run: dict[str, Any] = dict(
            protocol=protocol,
            eval_difficulty=head.eval_difficulty,
            num_episodes=head.num_episodes,
            max_steps=head.max_steps,
            on_env_mismatch="ignore",  # checked per cell by the builders
            batch=batch,
            on_progress=progress,
            record=_record_to(sinks, head.eval_difficulty, names),
            on_team=lambda i, records, padded=padded: finished(padded[i], records),
            padding=pads,
            first_episode=head.first_episode,
        )
        driven = {index[a]: g for a, g in agents.items() if a in index}
        if driven:
            result = run_agent_teams(cfgs, weights, slots, driven, on_note=note, **run)
        else:
            result = run_teams(cfgs, weights, slots, **run)
        for c in [c for c in loaded if last_use[c] <= n]:
            del loaded[c]
        ran["episodes"] += len(stack) * head.num_episodes
        ran["steps"] += result.live_steps
        for s in sinks:
            s.played(result)
    return int(ran["steps"])


def _record_to(sinks: Sequence[Sink], eval_difficulty: str, names: Sequence[str]) -> Any:
    """The play core's recording target for a stack: the sinks' recorders (one, or all
    of them in turn), or None when no sink records."""
    from alem_eval.evaluate.records import RecordTo

    recorders = [r for s in sinks if (r := s.recorder(eval_difficulty)) is not None]
    if not recorders:
        return None
    if len(recorders) == 1:  # a recorder with ``states`` (render's frames) plays alone
        return RecordTo(recorders[0], names, states=bool(getattr(recorders[0], "states", False)))
    if any(getattr(r, "states", False) for r in recorders):
        raise UsageError("a recording of env states (render) takes no other recorder")
    return RecordTo(_Recorders(recorders), names)


@dataclass(frozen=True)
class _Recorders:
    """Several sinks' recorders as one: each call to every one of them, in order."""

    recorders: Sequence[Any]

    def add_steps(self, *args: Any) -> None:
        for r in self.recorders:
            r.add_steps(*args)

    def finish_episode(self, *args: Any) -> None:
        for r in self.recorders:
            r.finish_episode(*args)


def stacks(
    groups: Sequence[Sequence[Match]],
    max_stack: int | None,
    shape: Callable[[Match], Any],
) -> list[tuple[list[Match], list[Match]]]:
    """``(stack, padded)`` pairs for ``groups`` (matches of one eval difficulty and episode
    settings each, one evaluator call per stack, all of one program family). Without
    ``max_stack``: each group in one stack, unpadded. Otherwise stacks hold at most
    ``max_stack`` matches of one group (more only when there are more shapes than that),
    each with the SAME number of matches of every ``shape`` of ALL the groups, taken
    round-robin. ``padded`` lists the stack shape by shape, in the same order for every
    stack, completing a short shape with repeats of its last match (of another group,
    maybe of another difficulty, when this group has none of that shape); the real matches
    are ``padded``'s entries that are in ``stack``. Every stack so has one structure: ONE
    compiled program plays them all (the difficulty is traced data), and each match is
    stored as soon as its last episode ends."""
    if max_stack is None:
        return [(list(g), list(g)) for g in groups]
    shapes: dict[Any, list[Match]] = {}  # every group's matches by shape, in order
    for group in groups:
        for m in group:
            shapes.setdefault(shape(m), []).append(m)
    per_group = [{s: [m for m in group if shape(m) == s] for s in shapes} for group in groups]
    most = max(len(g) for by in per_group for g in by.values())
    per = max(1, min(max_stack // len(shapes), most))
    out = []
    for by in per_group:
        rounds = max(-(-len(g) // per) for g in by.values())
        for r in range(rounds):
            parts = [(by[s][r * per : (r + 1) * per], by[s] or shapes[s]) for s in shapes]
            stack = [m for part, _ in parts for m in part]
            padded = [m for part, g in parts for m in part + [(part or g)[-1]] * (per - len(part))]
            out.append((stack, padded))
    return out


def _shape(members: Mapping[str, Member], agents: Mapping[str, Any], m: Match) -> tuple:
    """What a match brings to a program's structure: per distinct member (in slot order)
    the slots it drives and its network and whether it masks actions (the program computes
    masks when some member does: a shape of its own keeps that the same in every stack),
    or the agent's program key."""
    slots = m.team.slots
    return tuple(
        (
            ("agent", agents[c].key)
            if c in agents
            else (members[c].cfg.network_key, bool(members[c].cfg.env.action_masking)),
            tuple(s for s, x in enumerate(slots) if x == c),
        )
        for c in dict.fromkeys(slots)
    )


def _family(members: Mapping[str, Member], m: Match) -> tuple:
    """Matches whose stacks can share one compiled program: one world (env statics),
    episode count and reward-buffer size."""
    from alem_eval.evaluate.settings import CAPACITY_BUCKET, eval_statics

    cfg = next(members[c].cfg for c in m.team.slots if c in members)
    return eval_statics(cfg).world, m.num_episodes, -(-m.max_steps // CAPACITY_BUCKET)


def _as_padding(cfg, like):
    """``cfg`` as a padding member of a stack whose members have config ``like``: the key
    chain and worlds of ``like``'s reference run (padding plays unreported, but it must
    play where its stack does: ``reference`` checks every member ran the difficulty)."""
    ev = like.eval
    return dataclasses.replace(
        cfg,
        eval=dataclasses.replace(
            cfg.eval,
            seed=ev.seed,
            visualize=ev.visualize,
            eval_difficulties=ev.eval_difficulties,
            eval_seed=ev.eval_seed,
        ),
    )


class StoreSink(Sink):
    """The results store as a sink: each match's rows (under its key, with its ``extra``)
    written atomically as soon as its last episode ends."""

    def __init__(self, store: Any):
        self.store = store

    def match_done(self, match: Match, episodes: tuple[dict[str, float], ...]) -> None:
        from alem_eval.analysis.result_keys import build_rows

        self.store.write(build_rows(match.key, list(episodes)), match.key, extra=match.extra)


class ProgressSink(Sink):
    """Progress as a sink, through the library's callbacks (any of them None):
    ``on_read_back(read back, to play)`` once, ``on_stored(match, matches done)`` per
    match played, ``on_episodes(RolloutProgress)`` after every compiled call,
    ``on_note(line)``."""

    def __init__(
        self,
        on_read_back: Callable[[int, int], None] | None = None,
        on_stored: Callable[[Match, int], None] | None = None,
        on_episodes: Callable[[Any], None] | None = None,
        on_note: Callable[[str], None] | None = None,
    ):
        self.on_read_back, self.on_stored = on_read_back, on_stored
        self.on_episodes, self.on_note = on_episodes, on_note
        self.done = 0

    def begin(self, lineup: Lineup) -> None:
        self.done = len(lineup.read_back)
        if self.on_read_back is not None:
            self.on_read_back(len(lineup.read_back), len(lineup.to_play))

    def match_done(self, match: Match, episodes: tuple[dict[str, float], ...]) -> None:
        self.done += 1
        if self.on_stored is not None:
            self.on_stored(match, self.done)

    def progress(self, progress: Any) -> None:
        if self.on_episodes is not None:
            self.on_episodes(progress)

    def note(self, line: str) -> None:
        if self.on_note is not None:
            self.on_note(line)


class RecordingSink(Sink):
    """``--record`` as a sink: one :class:`alem_eval.datasets.recorder.Recorder` per eval
    difficulty under ``root``, opened on first use, gets every step played; each match's
    team is declared with its producer before it plays (:class:`RecordingWarning` when
    the recording holds episodes another produced), and a match the results store holds
    plays again unless all its episodes are recorded as this run would record them. A
    recording that fails raises :class:`DatasetError` after the call of the play core in
    which it failed (its scores are stored)."""

    def __init__(self, root: Path, protocol: str):
        from alem_eval.envs.loader import installed_env_version

        self.root, self.protocol = root, protocol
        self.env_version = installed_env_version()
        self._open: dict[str, Any] = {}
        self._declared: set[Match] = set()

    def recorder(self, eval_difficulty: str) -> Any:
        from alem_eval.datasets.recorder import Recorder

        if eval_difficulty not in self._open:
            self._open[eval_difficulty] = Recorder(
                self.root,
                protocol=self.protocol,
                eval_difficulty=eval_difficulty,
                env_version=self.env_version,
            )
        return self._open[eval_difficulty]

    def holds(self, match: Match) -> bool:
        """Is every episode of the match in the recording, recorded as this run would?"""
        self._declare(match)
        rec = self.recorder(match.eval_difficulty)
        return all(rec.is_complete(match.team.slots, e) for e in range(match.num_episodes))

    def begin(self, lineup: Lineup) -> None:
        for m in lineup.matches:
            self._declare(m)

    def played(self, result: Any) -> None:
        if result.record_error is not None:
            raise DatasetError(
                f"recording into {self.root} stopped: {result.record_error} (the scores "
                "are saved in the results store; rerun with --record to complete it)"
            )

    def _declare(self, m: Match) -> None:
        """Tell the match's recorder what produces its team's episodes (once); warn
        (:class:`RecordingWarning`) when the recording holds some another produced."""
        if m in self._declared:
            return
        self._declared.add(m)
        rec, team = self.recorder(m.eval_difficulty), m.team.slots
        rec.set_producer(team, m.producer)
        changed = {e: c for e in rec.recorded_episodes(team) if (c := rec.changes(team, e))}
        if changed:
            warnings.warn(_changed_message(m, changed, self.root), RecordingWarning, stacklevel=2)


def _changed_message(m: Match, changed: Mapping[int, Sequence[str]], root: Path) -> str:
    from alem_eval.core.producers import describe_changes

    again = [e for e in changed if e < m.num_episodes]
    kept = len(changed) - len(again)
    what = describe_changes([c for cs in changed.values() for c in cs])
    n = len(changed)
    text = (
        f"{m.name} ({m.eval_difficulty}): {n} episode{'s' if n > 1 else ''} recorded "
        f"in {root} {'differ' if n > 1 else 'differs'}: {what}"
    )
    if again:
        text += f"; recording {len(again)} of them again"
    if kept:
        text += f"; {kept} beyond this run's {m.num_episodes} episodes stay as they are"
    return text
