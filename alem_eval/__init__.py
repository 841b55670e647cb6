"""alem-eval: checkpoint hub and evaluation toolkit for the Alem MARL benchmark baselines."""

__version__ = "0.1.0"
