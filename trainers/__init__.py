"""alem-eval's trainers: one single-file trainer per released algorithm (``ippo_rnn``,
``mappo_rnn``, ``hypermarl_rnn``, ``pqn_vdn_rnn``), writing the released checkpoint
format. Shared pieces live in ``trainers/common.py``; the CLI is ``alem-eval train``."""
