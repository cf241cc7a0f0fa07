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
"""

from memlib._checks import ParameterError

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

__all__ = ["FACTORS", "ParameterError", "__version__"]
