"""memlib: learning what an LLM agent should remember.

A small library for the multi-factor memory value model
``V(m) = sum_i w_i f_i(m)`` over seven interpretable factors, the
operations it drives (encoding depth, forgetting, retrieval rank), a
gradient-free learner for the weights and the blind/oracle evaluation of
forgetting.

Glossary
--------
Each term means one thing in the code, the book and the results.

value, V(m)
    A memory's score under a :class:`memlib.value.Value`: the paper's ``V = f(m) @ w`` over the
    seven factors in [0, 1] with weights ``w >= 0`` (:class:`~memlib.value.LinearValue`), or a
    learned linear score over the store cues, which can be negative (:class:`~memlib.value.CueValue`).
V̄ (V-bar), normalised value
    V's place on its own value's scale, in [0, 1] and non-decreasing in V: ``V / sum(w)`` for the
    paper's value, the share of its training turns that score below V for a cue value. The
    encoding tiers, the store's retrieval mix and eq. 3 for a signed value read V̄.
keep fraction
    The share of each history's turns kept: ``ceil(keep_fraction * n)`` of ``n``, at least 1
    (:func:`memlib.metrics.keep_count`). Retention, the share of gold turns kept, is scored at it.
budget
    What a store may hold after it consolidates: at most ``budget`` unpinned items (or
    ``budget_tokens`` words), :meth:`memlib.store.MemoryStore.consolidate`. A study gives it as
    a count or as a keep fraction of each history.
history
    The sessions one question is asked over, in time order: its case's haystack (a LoCoMo
    conversation, a LongMemEval question's sessions, a RealMem persona's sessions before the
    question). Cases can share one; the store studies replay each through a store.
corpus
    One dataset (LoCoMo, LongMemEval-S or RealMem) as the store studies hold it: every history
    with its factors, cues and embeddings (:class:`memlib.studies.corpora.Corpus`). The defaults
    study learns on two corpora and measures on the third.
regime
    Where the goal-relevance anchor comes from (:data:`memlib.factors.REGIMES`): ``blind``, the
    conversation alone (by default the user turns of the turn's own session), as an agent has it;
    ``oracle``, the held-out question, which peeks at the future.
factor set
    One way to compute the seven factors, a choice of readings (:data:`memlib.factor_sets.READINGS`):
    ``paper`` (Table 1 as stated), ``extended`` (our cues in reliability) or ``released`` (as the
    authors' released experiment computes them).
embedding setting
    Word pieces kept per text and the runtime of the sentence model (:data:`memlib.embeddings.SETTINGS`):
    ``reference`` (256) and ``fast`` (128) on torch, ``int8`` (128) on the int8 ONNX export.

Examples
--------
>>> from memlib import FACTORS
>>> len(FACTORS)
7
>>> FACTORS[0]
'emotional_intensity'
>>> from memlib import learned_weights   # loaded on first use, with numpy only
>>> learned_weights.__module__
'memlib.study_weights'
"""

from memlib._checks import ParameterError

#: The version, the project's one version source (pyproject.toml reads it).
__version__ = "0.2.0"

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
_LAZY = {"learned_weights": "memlib.study_weights"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memlib' has no attribute {name!r}")


__all__ = ["FACTORS", "ParameterError", "__version__", "learned_weights"]
