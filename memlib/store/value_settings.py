"""The value a store scores its items with, as store attributes: :attr:`value`, :attr:`weights`.

:class:`ValueSettings` is a mixin of :class:`memlib.store.MemoryStore`: the store holds
one :class:`~memlib.value.Value` (the paper's linear value, summed as the store sums,
or a cue value) and, for the paper's value, its factor weights.
"""

from __future__ import annotations

import numpy as np

from memlib.store.checks import StoreLinearValue, check_store_weights, value_argument
from memlib.value import LinearValue, Value


class ValueSettings:
    """The store's value and weights (a mixin: the store sets ``_value`` and ``_weights`` through it)."""

    @property
    def value(self) -> Value:
        """The store's :class:`~memlib.value.Value`: what :meth:`values`, :meth:`tiers` and the explanations read.

        The paper's (a :class:`~memlib.store.checks.StoreLinearValue`, with :attr:`weights`)
        or a :class:`~memlib.value.CueValue`. Set it as the ``value`` argument of the store
        (a :class:`~memlib.value.LinearValue` is then summed as the store sums).
        """
        return self._value

    @value.setter
    def value(self, value) -> None:
        self._set_value(value_argument(value, None, self._weights))

    def _set_value(self, value: Value) -> None:
        self._value = value
        if isinstance(value, LinearValue):
            self._weights = value.weights

    @property
    def weights(self) -> np.ndarray:
        """The factor weights of the paper's value; a store with a cue value keeps them as a setting only.

        Setting them (not changing them in place) on a store with the paper's value sets its
        value, as ``weights=`` does.
        """
        return self._weights

    @weights.setter
    def weights(self, weights) -> None:
        w = check_store_weights(weights)
        if isinstance(self._value, LinearValue):
            self._set_value(StoreLinearValue(w))
        else:
            self._weights = w
