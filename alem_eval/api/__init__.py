"""The public Python API, re-exported lazily by :mod:`alem_eval` (``docs/python-api.md``).

* :mod:`alem_eval.api.functions`: select, pull, verify, score, leaderboard, report, crossplay;
* :mod:`alem_eval.api.agents`: a released policy (:func:`load_policy`) for your own code;
* :mod:`alem_eval.api.envs`: the evaluation environment (:func:`make_env`), alone or with
  frozen partners, and its PettingZoo face (:func:`parallel_env`);
* :mod:`alem_eval.api.demo`: ``alem-eval demo``, the whole pipeline on the bundled cells.

Import the names from :mod:`alem_eval` itself: ``import alem_eval as ae; ae.score(...)``.
"""
