"""alem-eval's trainers: one single-file trainer per released algorithm (``ippo_rnn``,
``mappo_rnn``, ``hypermarl_rnn``, ``pqn_vdn_rnn``), writing the released checkpoint
format. Shared pieces: ``common.py`` (maths, env helpers, the compiled Trainer),
``driver.py`` (training a group of cells: resume, chunks, progress, release),
``train_metrics.py`` (its trailing window, progress reports and JSONL log) and
``resume.py`` (the resume store). The CLI is ``alem-eval train`` (``alem_eval.trainers.planning``)."""
