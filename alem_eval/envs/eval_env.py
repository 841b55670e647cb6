"""The evaluation environment, built from a :class:`~alem_eval.algorithms.config.RunConfig` exactly as
upstream's ``_make_eval_env`` builds it (spec §3.2):

* ``EnvParams(shared_reward=SHARED_REWARD, randomize_alpha=False,
  **get_coordination_params(difficulty, scale_base=SCALE_BASE_DIFFICULTY))``, every other
  field at its default;
* ``StaticEnvParams(player_count=NUM_AGENTS, num_comm_channels=NUM_COMM_CHANNELS)``;
* ``make_alem_env_from_name(ENV_NAME, ...)``; episodes are stepped with ``step_env`` (no
  auto-reset), the action mask comes from ``compute_action_mask`` and episode metrics from
  ``compute_score`` -- nothing of the game is re-implemented here.

One compilation serves every difficulty: the ``EnvParams`` fields that differ between the
easy/medium/hard presets (for SCALE_BASE_DIFFICULTY=false: ``p_max_agents``,
``handover_window_min/max``, ``soft_solo_fail_prob``, ``non_specialist_efficiency``) are
passed as traced arrays (:class:`DifficultyParams`); all other fields stay Python
constants, which the environment needs for its Python-level branches
(``coordination_enabled``, ``soft_specialization``, ...). Inside a trace the upstream env
object is re-created around the bound ``EnvParams`` (:meth:`EvalEnv.bind`) and its own
jitted ``reset``/``step_env`` are called, so the step code is upstream's, unmodified.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, NamedTuple
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.envs.loader import AlemModules, import_alem
from alem_eval.envs.spaces import num_actions, obs_dim

DIFFICULTY_NAMES: tuple[str, ...] = ("easy", "medium", "hard")

# Traced values that select a difficulty: field name -> array (int32 or float32 scalar).
DifficultyParams = Mapping[str, jax.Array]


@dataclass(frozen=True)
class EnvStatics:
    """Everything about the eval env that fixes the compiled program (hashable)."""

    env_name: str
    num_agents: int
    num_comm_channels: int
    shared_reward: bool
    scale_base_difficulty: bool
    action_masking: bool
    append_agent_id: bool  # append the one-hot agent id to each agent's obs

    @property
    def world(self) -> EnvStatics:
        """The statics that matter for world generation and scoring only (no policy-side
        flags), so resets and scores are shared across algorithms."""
        return dataclasses.replace(self, action_masking=False, append_agent_id=False)

    @property
    def obs_dim(self) -> int:
        return obs_dim(self.num_agents, self.num_comm_channels)

    @property
    def input_dim(self) -> int:
        return self.obs_dim + (self.num_agents if self.append_agent_id else 0)

    @property
    def num_actions(self) -> int:
        return num_actions(self.num_agents, self.num_comm_channels)


class StepOutput(NamedTuple):
    obs: jax.Array  # [P, obs_dim] float32 raw observations, as reset gives them
    state: Any  # the env's EnvState
    reward: jax.Array  # [P] float32, in agent order
    agent_dones: jax.Array  # [P] bool
    done: jax.Array  # [] bool: the env's "__all__"


class EvalEnv:
    """A fixed-statics Alem eval env whose difficulty is a traced argument.

    All methods are pure and traceable; ``dyn`` is a :data:`DifficultyParams` (use
    :meth:`difficulty_params` to build it for a named difficulty).
    """

    def __init__(self, statics: EnvStatics, alem: AlemModules | None = None):
        self.statics = statics
        self.alem = alem or import_alem()
        a = self.alem
        self.static_env_params = a.StaticEnvParams(
            player_count=statics.num_agents, num_comm_channels=statics.num_comm_channels
        )
        per_diff = {d: self._env_params(d) for d in DIFFICULTY_NAMES}
        fields = [f for f in per_diff["easy"].__dataclass_fields__]
        values = {d: {f: getattr(p, f) for f in fields} for d, p in per_diff.items()}
        self.dynamic_fields: tuple[str, ...] = tuple(
            f for f in fields if len({repr(values[d][f]) for d in DIFFICULTY_NAMES}) > 1
        )
        for f in self.dynamic_fields:
            if not all(
                isinstance(values[d][f], (int, float)) and not isinstance(values[d][f], bool)
                for d in DIFFICULTY_NAMES
            ):
                raise TypeError(f"EnvParams.{f} differs between difficulties but is not numeric")
        # Static part: the easy preset; the dynamic fields are replaced at bind time.
        self._template = per_diff["easy"]
        self._per_difficulty = values
        # Sanity: the upstream env reports the shapes alem_eval.envs.spaces predicts.
        env = a.make_alem_env_from_name(
            statics.env_name, env_params=self._template, static_env_params=self.static_env_params
        )
        n_act = env.action_space(env.agents[0]).n
        if n_act != statics.num_actions:
            raise RuntimeError(f"alem reports {n_act} actions, expected {statics.num_actions}")
        self.agents: tuple[str, ...] = tuple(env.agents)
        # One jitted function per operation and env: inside any outer trace JAX reuses its
        # traced jaxpr (keyed by input types), so the expensive Python tracing of the Alem
        # step happens once per process, not once per compiled program.
        # Reset, step and score do not depend on the policy-side flags: they are shared
        # with the env of the world statics (so every algorithm reuses one trace).
        world = statics.world
        if world == statics:
            self._reset = jax.jit(self._reset_impl)
            self._step = jax.jit(self._step_impl)
            self._score = jax.jit(self._score_impl)
        else:
            shared = get_eval_env(world)
            self._reset, self._step, self._score = shared._reset, shared._step, shared._score
        self._mask = jax.jit(self._mask_impl)
        self._score_leaves: dict[Any, tuple[int, ...]] = {}
        self._columns: tuple[str, ...] | None = None

    # ------------------------------------------------------------------ params
    def _env_params(self, difficulty: str):
        a = self.alem
        return a.EnvParams(
            shared_reward=self.statics.shared_reward,
            randomize_alpha=False,
            **a.get_coordination_params(difficulty, scale_base=self.statics.scale_base_difficulty),
        )

    def env_params(self, difficulty: str):
        """The exact ``EnvParams`` upstream's ``_make_eval_env`` builds (host values)."""
        return self._env_params(difficulty)

    def difficulty_params(self, difficulty: str) -> dict[str, np.ndarray]:
        """Host arrays of the fields that distinguish ``difficulty`` (int32/float32 scalars)."""
        if difficulty not in DIFFICULTY_NAMES:
            raise ValueError(f"unknown difficulty {difficulty!r}")
        vals = self._per_difficulty[difficulty]
        return {
            f: np.asarray(vals[f], np.int32 if isinstance(vals[f], int) else np.float32)
            for f in self.dynamic_fields
        }

    def bind(self, dyn: DifficultyParams):
        """The upstream env object whose ``EnvParams`` carry ``dyn`` (may be tracers)."""
        params = self._template.replace(**{f: dyn[f] for f in self.dynamic_fields})
        return self.alem.make_alem_env_from_name(
            self.statics.env_name, env_params=params, static_env_params=self.static_env_params
        )

    @property
    def action_names(self) -> tuple[str, ...]:
        """The name of every action index: alem's ``Action`` enum for the base actions
        (``GIVE`` is the first give slot), then ``GIVE_1`` ... for the give slots of
        every teammate past the first, then ``COMM_0`` ... for the comm channels (the
        order alem's step reads them in)."""
        base = [a.name for a in sorted(self.alem.Action, key=lambda a: a.value)]
        gives = [f"GIVE_{i}" for i in range(1, max(0, self.statics.num_agents - 2) + 1)]
        comms = [f"COMM_{i}" for i in range(self.statics.num_comm_channels)]
        names = tuple(base + gives + comms)
        if len(names) != self.statics.num_actions:
            raise RuntimeError(f"{len(names)} action names for {self.statics.num_actions} actions")
        return names

    def observation_bounds(self) -> tuple[float, float]:
        """``(low, high)`` of one agent's observation values, as alem's observation space
        states them."""
        env = self.alem.make_alem_env_from_name(
            self.statics.env_name,
            env_params=self._template,
            static_env_params=self.static_env_params,
        )
        space = env.observation_space(env.agents[0])
        return float(np.min(space.low)), float(np.max(space.high))

    # ------------------------------------------------------------------ dynamics
    def stack_obs(self, obs: Mapping[str, jax.Array]) -> jax.Array:
        """The env's per-agent obs dict stacked in agent order: ``[P, obs_dim]`` float32."""
        return jnp.stack([obs[a] for a in self.agents])

    def preprocess(self, raw: jax.Array) -> jax.Array:
        """Policy input ``[P, input_dim]``: the raw obs, followed by the one-hot agent id
        when :attr:`EnvStatics.append_agent_id` (as AppendAgentIDWrapper and JaxMARL's
        CTRolloutManager append it)."""
        if not self.statics.append_agent_id:
            return raw
        return jnp.concatenate([raw, jnp.eye(raw.shape[0], dtype=raw.dtype)], axis=-1)

    def reset(self, key: jax.Array, dyn: DifficultyParams) -> tuple[jax.Array, Any]:
        """``env.reset(key)`` (world generation) -> (RAW obs ``[P, obs_dim]``, state).

        The raw obs does not depend on the policy, so one compiled reset serves every
        algorithm; apply :meth:`preprocess` before feeding it to a policy.
        """
        return self._reset(key, dyn)

    def _reset_impl(self, key, dyn):
        obs, state = self.bind(dyn).reset(key)
        return self.stack_obs(obs), state

    def step(
        self, key: jax.Array, state: Any, actions: jax.Array, dyn: DifficultyParams
    ) -> StepOutput:
        """One ``env.step_env`` (no auto-reset) with ``actions`` [P] int in agent order.

        Its obs are RAW ``[P, obs_dim]``, like :meth:`reset`'s: apply :meth:`preprocess`
        before feeding them to a policy (the evaluator's policies do it themselves).
        """
        return self._step(key, state, actions, dyn)

    def _step_impl(self, key, state, actions, dyn) -> StepOutput:
        env = self.bind(dyn)
        obs, state, rewards, dones, _ = env.step_env(
            key, state, {a: actions[i] for i, a in enumerate(self.agents)}
        )
        return StepOutput(
            obs=self.stack_obs(obs),
            state=state,
            reward=jnp.stack([rewards[a] for a in self.agents]),
            agent_dones=jnp.stack([dones[a] for a in self.agents]),
            done=dones["__all__"],
        )

    def action_mask(self, state: Any, dyn: DifficultyParams) -> jax.Array:
        """[P, A] bool: ``compute_action_mask`` when ACTION_MASKING, else all ones."""
        return self._mask(state, dyn)

    def _mask_impl(self, state, dyn):
        p, n = self.statics.num_agents, self.statics.num_actions
        if not self.statics.action_masking:
            return jnp.ones((p, n), dtype=jnp.bool_)
        env = self.bind(dyn)
        return self.alem.compute_action_mask(state, env.default_params, self.static_env_params)

    def score(self, state: Any) -> dict[str, jax.Array]:
        """``compute_score(state, done=True)``, flattened to ``{"A/B": value}``; values are
        left unreduced (``[P]`` arrays), see :func:`upstream_mean`."""
        return self._score(state)

    def _score_impl(self, state):
        tree = self.alem.compute_score(state, jnp.array(True), self.static_env_params)
        out: dict[str, jax.Array] = {}
        _flatten("", tree, out)
        return out

    def score_columns(self) -> tuple[str, ...]:
        """The keys :meth:`score` returns (sorted), found by tracing a reset and
        ``compute_score`` on abstract values (about a second once the env is built; cached):
        what a metric name can be checked against before any episode is played."""
        if self._columns is None:
            dyn = self.difficulty_params(DIFFICULTY_NAMES[0])
            _, state = jax.eval_shape(self._reset_impl, jax.random.PRNGKey(0), dyn)
            self._columns = tuple(jax.eval_shape(self._score_impl, state))
        return self._columns

    def team_achievements(self, state: Any) -> jax.Array:
        """[] int32: how many distinct achievements any agent of the team has unlocked."""
        return jnp.sum(jnp.any(state.achievements, axis=0), dtype=jnp.int32)

    def score_leaf_indices(self, state_like: Any) -> tuple[int, ...]:
        """Indices (in ``tree_leaves`` order) of the state leaves ``compute_score`` reads.

        Found by tracing ``compute_score`` (conservatively: any use counts), cached per
        state structure. About 1 kB of the ~390 kB state: it is all an episode's record
        needs, so a finished episode can freeze just these leaves.
        """
        leaves, treedef = jax.tree_util.tree_flatten(state_like)
        key = (treedef, tuple((tuple(np.shape(x)), str(x.dtype)) for x in leaves))
        cached = self._score_leaves.get(key)
        if cached is None:
            specs = [jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in leaves]
            closed = jax.make_jaxpr(
                lambda *xs: self._score_impl(jax.tree_util.tree_unflatten(treedef, xs))
            )(*specs)
            used = {id(v) for eqn in closed.jaxpr.eqns for v in eqn.invars}
            used |= {id(v) for v in closed.jaxpr.outvars}
            cached = tuple(i for i, v in enumerate(closed.jaxpr.invars) if id(v) in used)
            self._score_leaves[key] = cached
        return cached


def _flatten(prefix: str, tree: Any, out: dict[str, Any]) -> None:
    """Nested dicts -> ``"a/b"`` keys, in the env's own key order (as upstream flattens)."""
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = tree


_MEAN_MEMO: dict[tuple, float] = {}


def upstream_mean(value: np.ndarray) -> float:
    """Upstream's reduction of one score value: ``float(jnp.array(value).mean())``.

    It is run exactly as upstream runs it (the jitted ``jnp.mean`` of the unreduced
    ``[P]`` array, on the default backend) because its float32 result depends on how XLA
    compiles that small program: on CPU it sums in the order (a0 + a2) + a1 and multiplies
    by float32(1/P), and inside a larger jit the mean of a broadcast scalar is simplified
    away altogether -- both differ in the last bit from a plain ``sum / P``. Results are
    memoised by value (most score values repeat, e.g. zeros).
    """
    v = np.asarray(value)
    key = (v.dtype.str, v.shape, v.tobytes())
    out = _MEAN_MEMO.get(key)
    if out is None:
        out = _MEAN_MEMO[key] = float(jnp.array(v).mean())
    return out


@functools.cache
def get_eval_env(statics: EnvStatics) -> EvalEnv:
    """The (cached) :class:`EvalEnv` for these statics; imports alem quietly on first use."""
    return EvalEnv(statics)
