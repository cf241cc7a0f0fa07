"""memlib: learning what an LLM agent should remember.

A small library for the multi-factor memory value model
``V(m) = sum_i w_i f_i(m)`` over seven interpretable factors, the
operations it drives (encoding depth, forgetting, retrieval rank), a
gradient-free learner for the weights and the blind/oracle evaluation of
forgetting.

>>> from memlib import FACTORS
>>> len(FACTORS)
7
>>> FACTORS[0]
'emotional_intensity'
>>> from memlib import learned_weights   # loaded on first use, with numpy only
>>> learned_weights.__module__
'memlib.value'
"""

from memlib._checks import ParameterError

#: The version, the project's one version source (pyproject.toml reads it).
__version__ = "0.1.0"

#: The seven memory-value factors, in the paper's order (Table 1).
FACTORS = (
    "emotional_intensity",
    "goal_relevance",
    "value_alignment",
    "self_relevance",
    "task_utility",
    "reliability",
    "usage_history",
)

#: Names importable from ``memlib`` whose modules load on first use.
_LAZY = {"learned_weights": "memlib.value"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memlib' has no attribute {name!r}")


__all__ = ["FACTORS", "ParameterError", "__version__", "learned_weights"]
