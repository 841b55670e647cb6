"""The play core: teams of policies in compiled, batched rollouts of the Alem env.

Greedy episodes of teams of checkpoints, any algorithms mixed, in one compiled call per
env configuration (gymnax / PureJaxRL style: everything pure and jitted once). What is
where, from the calls down:

* :mod:`~alem_eval.evaluate.rollout` -- the evaluation calls: ``run_teams`` (any
  checkpoint in any agent slot), ``run_stack`` and ``score_stack`` (self-play), their
  ``StackResult`` and ``RolloutProgress``; a request's checks and its grouping by world.
* :mod:`~alem_eval.evaluate.group` -- one group of teams in one program: batch sizing,
  staging the weights, resets, and the host loop that drives the program (``_drive``).
* :mod:`~alem_eval.evaluate.records` -- per-episode records and scores from the output
  buffer, ``upstream_view``, and the recording of every step (``RecordTo``; with
  ``states``, each step's env state too: what render draws).
* :mod:`~alem_eval.evaluate.worlds` -- the protocols' fixed worlds reset once and kept
  as data (``fixed_worlds``: shipped for the demo cells, else cached on disk, keyed by
  ``world_identity``).
* :mod:`~alem_eval.evaluate.programs` -- the compiled programs (``Program``, cached per
  ``ProgramKey``; the world's reset and score programs), their sharding over devices, and
  the ``jax.export`` warm start (``_code_identity``: the source hash it is valid for);
  ``COMPILE_STATS``.
* :mod:`~alem_eval.evaluate.machine` -- the continuous-batching rollout (``Machine``:
  pure ``start`` / ``advance``), the loop state it carries, ``Status`` and ``StepLog``;
  ``TRACE_COUNTS``.
* :mod:`~alem_eval.evaluate.teams` -- team structure (``Role``, ``TeamClass``,
  ``team_roles``, ``batch_structure``, ``check_team``) and one policy step of every
  team (``init_team_carries``, ``team_actions``).
* :mod:`~alem_eval.evaluate.agents` -- the focal-agent protocol (``Agent``), the JAX
  agent's actor (``JaxAgent``) and ``make_group`` (an agent object -> its actor).
* :mod:`~alem_eval.evaluate.host_agents` -- the host agent's actor (``HostAgent``,
  ``host = True``): its one callback per step (``host_actions``), the run's bindings
  (``bind_host_agents``), faults (``raise_failure``), ``HostInfo`` and the probe step
  (``probe_host``).
* :mod:`~alem_eval.evaluate.actors` -- what drives a slot, ONE interface (``Actor``:
  ``variables`` / ``prepare`` / ``init`` / ``act`` -> ``RoleStep``, ``resolve``,
  ``checked``, ``probe``, ``ready``) and its three classes' common parts: a checkpoint's
  greedy policy (``ReleasedPolicy``, ``released_policy``, ``policy_variables``), the
  agents' ``AgentActor`` (``JaxAgent``, ``HostAgent``); nothing above asks which class
  drives a slot.
* :mod:`~alem_eval.evaluate.settings` -- protocols and their constants, the request
  checks (``check_settings``, ``check_env_version``, ``check_eval_difficulty``), the eval
  env of a config (``eval_statics``, ``record_columns``), the keys (``reference_key``,
  ``fast_keys``), batch sizing (``default_batch``, ``slots_per_team``) and
  ``episode_settings``.

Each module imports only those listed below it (``rollout`` -> ``group`` -> ``records``,
``worlds`` -> ``programs`` -> ``machine`` -> ``teams`` -> ``agents`` -> ``host_agents`` ->
``actors`` and ``settings``).
"""
