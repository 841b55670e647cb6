"""The public Python API, re-exported lazily by :mod:`alem_eval` (``docs/python-api.md``,
whose table lists every function, its first argument, what it returns and its command).

* :mod:`alem_eval.api.cells`: ``Cell``, ``select`` and how every function reads its first
  argument (cells or selectors) and ``source=``;
* :mod:`alem_eval.api.calls`: what every function does alike (progress, the compilation
  cache, old spellings kept for a release, ``to_frame`` / ``to_json``);
* :mod:`alem_eval.api.functions`: pull, verify, score, compare;
* :mod:`alem_eval.api.stored`: results, leaderboard, report, export, merge (the results
  store);
* :mod:`alem_eval.api.crossplay`, :mod:`alem_eval.api.scenario`: teams of mixed agents,
  over :mod:`alem_eval.api.teams` (what the two do alike: the cells, a dry run's plan,
  the episode bar, the run, the files written);
* :mod:`alem_eval.api.render`: one episode drawn; :mod:`alem_eval.api.training`: train;
* :mod:`alem_eval.api.agents`: a released policy (:func:`load_policy`) for your own code;
* :mod:`alem_eval.api.envs`: the evaluation environment (:func:`make_env`), alone or with
  frozen partners, and its PettingZoo face (:func:`parallel_env`);
* :mod:`alem_eval.api.demo`: ``alem-eval demo``, the whole pipeline on the bundled cells.

Import the names from :mod:`alem_eval` itself: ``import alem_eval as ae; ae.score(...)``.
"""
