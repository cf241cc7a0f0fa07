"""The store's forgetting policies: ours (:class:`ValuePolicy`) and one registry of all of them.

:data:`POLICIES` maps each policy's name to its class: the paper's value policy
and the published baselines of :mod:`memlib.store.baselines`. :func:`make_policy`
builds one by name; :meth:`memlib.store.MemoryStore.load` rebuilds a saved
store's policy from the same registry (a saved store names its policy's class, so a
name changed here never changes what a store file holds).

Ours is named ``value``. ``learned_V``, its name before 0.2.0, is the Table 3 scoring rule's
(:data:`memlib.scoring.SCORING_RULES`), which ranks turns by the learned value offline;
:func:`make_policy` refuses it with an error that names ``value``.

>>> make_policy("value", beta=2.0).config()["beta"]
2.0
>>> sorted(POLICIES)
['adaptive', 'generative_agents', 'memgpt_fifo', 'memorybank', 'paper', 'rag_unbounded', 'recency', 'value']
>>> make_policy("lru")
Traceback (most recent call last):
...
memlib._checks.ParameterError: unknown policy 'lru'; choose one of: value, adaptive, paper, generative_agents, ...
>>> make_policy("learned_V")
Traceback (most recent call last):
...
memlib._checks.ParameterError: the store policy 'learned_V' is named 'value' since memlib 0.2.0: ...
"""

from __future__ import annotations

import inspect

import numpy as np

from memlib._checks import ParameterError, check_choice, check_positive
from memlib.forgetting import eq3_scorer, rule_forget_scores
from memlib.references import Need, Z
from memlib.store.baselines import (
    FIFOPolicy,
    GenerativeAgentsPolicy,
    MemoryBankPolicy,
    RecencyPolicy,
    UnboundedRAGPolicy,
)
from memlib.store.protocol import Policy


class ValuePolicy(Policy):
    """One value for forgetting and retrieval, with the store's measured defaults.

    Forgetting: with ``keep_top_value`` the item with the lowest normalised value
    ``V-bar`` goes first; otherwise eq. 3, ``age**0.7 / (1 + r) / (1 + beta * V)`` with
    age in days at consolidation time, on the paper's ``V = f @ w`` as the paper writes it,
    or on ``V-bar`` (the store's :meth:`~memlib.store.MemoryStore.normalised_values`, in
    [0, 1]) for a learned cue value, which can be negative.

    Retrieval: ``sim + value_weight * V-bar + mood_weight * mood`` where ``sim =
    (1 + cos(query, item)) / 2`` and mood congruence ``mood = 1 - |valence(query) -
    valence(item)| / 2`` (VADER valences), all in [0, 1].

    A parameter left at ``None`` takes its measured default from ``memlib/defaults.json``
    (:func:`memlib.value.load_defaults`): the rule and constants that kept the most gold
    evidence, and the mix that retrieved it best, on held-out LoCoMo and LongMemEval-S
    histories (:mod:`memlib.studies.defaults`). A ``beta`` given without ``keep_top_value``
    asks for eq. 3 (``beta`` means nothing to the drop-by-value rule). The paper's own rule
    is :class:`PaperPolicy`.

    >>> ValuePolicy(beta=5.0).keep_top_value, ValuePolicy(beta=5.0, keep_top_value=True).keep_top_value
    (False, True)
    """

    name = "value"

    def __init__(
        self,
        beta: float | None = None,
        value_weight: float | None = None,
        mood_weight: float | None = None,
        keep_top_value: bool | None = None,
    ):
        from memlib.value import load_defaults

        if beta is not None and keep_top_value is None:
            keep_top_value = False
        d = load_defaults()["policy"] if None in (beta, value_weight, mood_weight, keep_top_value) else {}
        self.beta = check_positive("beta", d["beta"] if beta is None else beta, allow_zero=True)
        self.value_weight = check_positive(
            "value_weight", d["value_weight"] if value_weight is None else value_weight, allow_zero=True
        )
        self.mood_weight = check_positive(
            "mood_weight", d["mood_weight"] if mood_weight is None else mood_weight, allow_zero=True
        )
        self.keep_top_value = bool(d["keep_top_value"] if keep_top_value is None else keep_top_value)

    @property
    def static_order(self) -> bool:
        """Dropping the lowest value first orders the items once and for all; eq. 3 moves with age."""
        return self.keep_top_value

    def forget_scores(self, view, now):
        """Return eq. 3's forget score of each item, or minus ``V-bar`` with ``keep_top_value``."""
        if self.keep_top_value:
            return rule_forget_scores("value", None, None, value_bar=view.normalised_values())
        v = view.eq3_values()  # the paper's V, or V-bar for a signed (cue) value
        return rule_forget_scores("eq3", np.maximum(now - view.time, 0.0), view.retrievals, value=v, beta=self.beta)

    def forget_scorer(self, view):
        """:meth:`~memlib.store.protocol.Policy.forget_scorer`: eq. 3 with a batch history's values read once.

        Dropping by value (a static order, sorted once by a replay) and a subclass that scores in its
        own way (its own ``forget_scores``) are scored by the default.
        """
        if self.keep_top_value or not view.holds_values or type(self).forget_scores is not ValuePolicy.forget_scores:
            return Policy.forget_scorer(self, view)
        eq3 = eq3_scorer(view.time, view.retrievals, view.eq3_values(), self.beta)
        return lambda positions, now, need=None: eq3(positions, now)

    def retrieval_scores(self, view, query_vec, query_valence, now):
        """Return similarity plus ``value_weight`` times ``V-bar`` plus ``mood_weight`` times the mood match."""
        mood = 1.0 - np.abs(query_valence - view.valence) / 2.0
        return view.similarity(query_vec) + self.value_weight * view.normalised_values() + self.mood_weight * mood

    def config(self):
        """Return the keyword arguments that rebuild this policy."""
        return {
            "beta": self.beta,
            "value_weight": self.value_weight,
            "mood_weight": self.mood_weight,
            "keep_top_value": self.keep_top_value,
        }


class PaperPolicy(ValuePolicy):
    """The paper's rules as written: eq. 3 on ``V``, and retrieval by ``sim + 0.5 V-bar + 0.1 mood``.

    The retrieval weights are :attr:`VALUE_WEIGHT` and :attr:`MOOD_WEIGHT`; every study that
    scores the paper's rules reads them here.

    ``age**0.7 / (1 + r) / (1 + beta * V)`` with ``beta = 1`` unless given (the paper names
    no ``beta``): age dominates value resistance, so the newest session is never at risk and
    whatever is a day older goes first. Kept for comparison (``make_policy("paper")``);
    :class:`ValuePolicy` holds the measured defaults. With a value that can be negative (a
    learned cue value) eq. 3 reads ``V-bar`` instead of ``V``.
    """

    name = "paper"
    #: The paper's retrieval mix: ``sim + VALUE_WEIGHT * V-bar + MOOD_WEIGHT * mood``.
    VALUE_WEIGHT, MOOD_WEIGHT = 0.5, 0.1

    def __init__(self, beta: float = 1.0):
        super().__init__(beta=beta, value_weight=self.VALUE_WEIGHT, mood_weight=self.MOOD_WEIGHT, keep_top_value=False)

    def config(self):
        """Return the keyword arguments that rebuild this policy (only ``beta``: the rest are fixed)."""
        return {"beta": self.beta}


class AdaptivePolicy(ValuePolicy):
    """The value policy that learns how its user's need falls with age, from the stream itself.

    Forgetting: the item with the lowest ``value_scale * V-bar - b * log(lag)`` goes first, where
    ``lag`` is the item's age at the next session, in sessions, and ``b`` the stream's need
    exponent (:meth:`memlib.references.Need.exponent`): the chance that a turn of age ``lag`` is
    needed falls as ``lag ** -b``, the form of eq. 3's ``age ** 0.7`` with the exponent learned
    from the user's own references (a user's turn that says again what a held turn of an
    earlier session said), and kept at 0 until a likelihood-ratio interval at ``z`` excludes 0
    (never below 0: need never rises with age).
    Both terms are log odds of being needed; ``value_scale`` puts the value on that scale. A
    young stream, or one whose references reach back to every age alike, forgets exactly as
    dropping the lowest value first does; a stream whose user keeps coming back to last week
    keeps last week. Retrieval is the value policy's (``sim + value_weight * V-bar + mood_weight
    * mood``).

    A parameter left at ``None`` takes its measured default (``memlib/defaults.json``, its
    ``adaptive`` part, when there is one).

    >>> from memlib.references import Need
    >>> from memlib.store.view import StoreView
    >>> from memlib.value import LinearValue
    >>> F = np.zeros((2, 7)); F[:, 0] = [0.9, 0.5]
    >>> view = StoreView.of_history(LinearValue(np.eye(7)[0]), time=[0.0, 29.0], embeddings=np.eye(384)[:2],
    ...     factors=F, cues=np.zeros((2, 12)), valence=np.zeros(2))
    >>> AdaptivePolicy(value_scale=2.0, z=2.0).forget_scores(view, now=30.0).round(2).tolist()  # no references
    [-1.8, -1.0]
    >>> view.need = Need()
    >>> for _ in range(40):  # forty sessions later, in which the user kept reaching back two or three sessions
    ...     view.need = view.need.counted([0, 6, 2, 1, 0, 0, 0, 0], [10] * 8, boundary=1)
    >>> round(view.need.exponent(2.0), 2), view.need.lag_at_next(view.ids).tolist()
    (1.8, [40, 0])
    >>> AdaptivePolicy(value_scale=2.0, z=2.0).forget_scores(view, now=30.0).round(2).tolist()  # the old one goes
    [4.84, -1.0]
    """

    name = "adaptive"
    reads_need = True

    def __init__(
        self,
        value_scale: float | None = None,
        z: float | None = None,
        value_weight: float | None = None,
        mood_weight: float | None = None,
    ):
        from memlib.value import load_defaults

        d = load_defaults() if None in (value_scale, z, value_weight, mood_weight) else {}
        a = d.get("adaptive", {})
        super().__init__(
            beta=1.0,
            value_weight=d["policy"]["value_weight"] if value_weight is None else value_weight,
            mood_weight=d["policy"]["mood_weight"] if mood_weight is None else mood_weight,
            keep_top_value=True,
        )
        self.value_scale = check_positive(
            "value_scale", a.get("value_scale", 1.0) if value_scale is None else value_scale
        )
        self.z = check_positive("z", a.get("z", Z) if z is None else z, allow_zero=True)

    @property
    def static_order(self) -> bool:
        """The need moves with the stream: no order holds once and for all."""
        return False

    def exponent(self, view) -> float:
        """Return the stream's need exponent ``b`` (0 until its references say otherwise)."""
        return (view.need or Need()).exponent(self.z)

    def forget_scores(self, view, now):
        """Return minus ``value_scale * V-bar - b * log(lag)``: the least needed item goes first."""
        return self._least_needed_first(view.normalised_values(), view.ids, view.need, self.exponent(view))

    def forget_scorer(self, view):
        """:meth:`~memlib.store.protocol.Policy.forget_scorer`, reading a batch history's values once.

        A subclass that scores in its own way (its own ``forget_scores`` or ``exponent``) is scored by it.
        """
        cls = type(self)
        mine = cls.forget_scores is AdaptivePolicy.forget_scores and cls.exponent is AdaptivePolicy.exponent
        if not view.holds_values or not mine:
            return Policy.forget_scorer(self, view)
        v_bar, ids = view.normalised_values(), view.ids

        def score(positions, now, need=None):
            need = (view.need if need is None else need) or Need()  # what self.exponent reads of the taken view
            return self._least_needed_first(v_bar[positions], ids[positions], need, need.exponent(self.z))

        return score

    def _least_needed_first(self, v_bar, ids, need, b: float) -> np.ndarray:
        """Return the forget scores of items of normalised values ``v_bar`` and ids ``ids``, the need exponent ``b``."""
        return -(self.value_scale * v_bar - self._need_terms_of(ids, need, b))

    @staticmethod
    def _need_terms_of(ids, need, b: float) -> np.ndarray:
        """``b * log(lag)`` of each item id: how much less likely it is to be needed for its age."""
        if b == 0.0:  # no age preferred: every term is 0 (0 times a finite log), so no lag need be read
            return np.zeros(len(ids))
        return b * np.log(np.maximum((need or Need()).lag_at_next(ids), 1))

    def explain_terms(self, view, i: int) -> dict:
        """Return item ``i``'s need: the stream's exponent, its lag in sessions and the need term of its score.

        >>> from memlib.store.view import StoreView
        >>> from memlib.value import LinearValue
        >>> view = StoreView.of_history(LinearValue(np.eye(7)[0]), time=[0.0], embeddings=np.eye(384)[:1],
        ...     factors=np.zeros((1, 7)), cues=np.zeros((1, 12)), valence=np.zeros(1))
        >>> AdaptivePolicy(value_scale=1.0, z=2.0).explain_terms(view, 0)
        {'need_exponent': 0.0, 'sessions_ago': 1, 'need_term': 0.0}
        """
        need = view.need or Need()
        lag = int(max(need.lag_at_next(view.ids[i : i + 1])[0], 1))
        return {
            "need_exponent": self.exponent(view),
            "sessions_ago": lag,
            "need_term": float(self._need_terms_of(view.ids, view.need, self.exponent(view))[i]),
        }

    def config(self):
        """Return the keyword arguments that rebuild this policy."""
        kw = {"value_scale": self.value_scale, "z": self.z}
        return kw | {"value_weight": self.value_weight, "mood_weight": self.mood_weight}


def default_policy() -> Policy:
    """Return the store's default policy: what ``memlib/defaults.json`` chose.

    :class:`AdaptivePolicy` when the file holds an ``adaptive`` part, else :class:`ValuePolicy`.
    """
    from memlib.value import load_defaults

    return AdaptivePolicy() if "adaptive" in load_defaults() else ValuePolicy()


#: Store policy names before 0.2.0, each with its name now: :func:`make_policy` refuses them, naming the new one.
#: (A store file names its policy's class, ``ValuePolicy`` under either name, so old files load unchanged.)
OLD_NAMES = {"learned_V": ValuePolicy.name}


#: Every built-in policy by name (its ``name`` attribute), ours first.
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        ValuePolicy,
        AdaptivePolicy,
        PaperPolicy,
        GenerativeAgentsPolicy,
        MemoryBankPolicy,
        FIFOPolicy,
        RecencyPolicy,
        UnboundedRAGPolicy,
    )
}


def make_policy(name: str, **params) -> Policy:
    """Return the policy registered as ``name``, built with ``params`` (e.g. ``beta`` for ``value``).

    A name from before 0.2.0 (:data:`OLD_NAMES`: ``learned_V`` for ``value``) is a
    :class:`~memlib._checks.ParameterError` that names the policy's name now.

    >>> make_policy("memorybank", beta=1.0)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: policy memorybank takes no parameter beta; it takes: none
    """
    if isinstance(name, str) and name in OLD_NAMES:
        new = OLD_NAMES[name]
        raise ParameterError(
            f"the store policy {name!r} is named {new!r} since memlib 0.2.0: make_policy({new!r}) "
            f"({name!r} is the Table 3 scoring rule of memlib.scoring)"
        )
    cls = POLICIES[check_choice("policy", name, POLICIES)]
    accepted = inspect.signature(cls).parameters
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise ParameterError(
            f"policy {name} takes no parameter {', '.join(unknown)}; it takes: {', '.join(accepted) or 'none'}"
        )
    return cls(**params)
