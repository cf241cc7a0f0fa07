"""The learners of the cue study (chapter 09, :mod:`memlib.studies.cues`).

Each fits one value model on the training cases of a :class:`~memlib.studies.cue_data.CueData`.

:func:`fit_cue_model` fits one of :data:`LEARNERS` (linear searches and the convex surrogate over
standardised cues, or a non-linear ceiling, run on one thread by :func:`single_thread`);
:func:`paper_weights` learns the paper's value (seven factors, Algorithm 1) on the same cases.

>>> LINEAR_LEARNERS
('hill_climb', 'cma_es', 'surrogate', 'surrogate+hill_climb')
>>> learner_budget(quick=True)
{'n_iter': 40, 'epochs': 20, 'gbm_iter': 20}
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

from memlib._checks import check_choice
from memlib.feature_fits import standardise
from memlib.learning import (
    N_ITER,
    RESTARTS,
    cma_es_signed,
    fit_gbm_ranker,
    fit_mlp,
    fit_pairwise_logistic,
    hill_climb,
    hill_climb_signed,
    retention_mass,
)
from memlib.metrics import RetentionEvaluator
from memlib.studies._memo import Recall, content_key
from memlib.studies.cue_data import CueData
from memlib.value import LinearValue

#: Linear learners of the cue value (signed weights).
LINEAR_LEARNERS = ("hill_climb", "cma_es", "surrogate", "surrogate+hill_climb")
#: Non-linear ceilings over the same cues.
NONLINEAR_LEARNERS = ("mlp", "gbm")
LEARNERS = LINEAR_LEARNERS + NONLINEAR_LEARNERS
#: The paper's value: seven factors, non-negative weights, Algorithm 1.
PAPER_MODEL = "paper_factors"
#: Models fit by some learners only (the others by every learner of :data:`LEARNERS`).
MODEL_LEARNERS = {"cues_user": ("surrogate",), "cues_relative": ("surrogate",)}


def learner_budget(quick: bool) -> dict:
    """Objective evaluations of the searches and MLP epochs: the defaults, or fewer in quick mode."""
    return dict(n_iter=40, epochs=20, gbm_iter=20) if quick else dict(n_iter=N_ITER, epochs=200, gbm_iter=200)


# --------------------------------------------------------------------------- fitting one model


@contextmanager
def single_thread():
    """Run torch and the OpenMP/BLAS pools on one thread, then restore them.

    The non-linear fits here are small (thousands of rows): on a shared two-core machine their
    thread pools spent more time contending than computing (an MLP fit took 13 s on two threads
    and 0.3 s on one).
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


def fit_cue_model(learner: str, train: CueData, table_of, keep_fraction: float, seed: int = 0, quick: bool = False):
    """Fit one learner on ``train`` and return ``(score, weights)``.

    ``table_of(data)`` picks the cue table of a :class:`CueData` (raw or calibrated, which
    cues). ``score(data)`` maps any :class:`CueData` with the same cues to (G, N) scores;
    ``weights`` are the linear weights per cue in the units of the table (None for the
    non-linear learners).
    """
    check_choice("learner", learner, LEARNERS)
    budget = learner_budget(quick)
    tab = table_of(train)
    X = tab.values
    mu, sd = standardise(X, tab.valid)
    Z = ((X - mu) / sd).astype(np.float32)
    target = retention_mass(train.cases)
    if learner in NONLINEAR_LEARNERS:
        with single_thread():
            return _fit_nonlinear(learner, X, Z, mu, sd, tab, target, train, table_of, budget, seed)

    ev = RetentionEvaluator(train.cases, keep_fraction)

    def objective(w):
        return ev.mean(Z @ np.asarray(w, dtype=np.float32))

    n_iter = budget["n_iter"]
    if learner == "hill_climb":
        wz = hill_climb_signed(objective, np.ones(Z.shape[-1]), n_iter=n_iter, restarts=1, seed=seed).weights
    elif learner == "cma_es":
        wz = cma_es_signed(objective, np.ones(Z.shape[-1]), max_evals=n_iter, seed=seed).weights
    else:
        wz = surrogate_weights(Z, tab.length, target)
        if learner == "surrogate+hill_climb":
            wz = hill_climb_signed(objective, wz, n_iter=n_iter, restarts=1, seed=seed).weights
    w = wz / sd

    def score(data):
        return table_of(data).values @ w.astype(np.float32)

    return score, w


#: The surrogate fits of the current :func:`shared_fits` block, by content of what they were fit on.
_FITS = Recall("shared_surrogate_fits")


def shared_fits():
    """Within the block, fit the convex surrogate once per training table and reuse it.

    The cue study fits the surrogate on the same training cues many times: ``surrogate`` and
    ``surrogate+hill_climb`` start from the same fit, and the ablation's full model, the
    keep-fraction curve and the leave-one-group-out rows refit what :func:`evaluate` already fit
    on the same split. The fit is deterministic (no seed), so a fit read back is the fit that
    would have been made again, to the bit; nothing outlives the block (:class:`~._memo.Recall`).

    >>> with shared_fits():
    ...     _FITS.table() == {}
    True
    >>> _FITS.table() is None
    True
    """
    return _FITS.block()


def surrogate_weights(Z: np.ndarray, length, target) -> np.ndarray:
    """Fit :func:`~memlib.feature_fits.fit_pairwise_logistic` on ``(Z, length, target)``, standardised cues.

    In a :func:`shared_fits` block, once per content (a copy of the first fit each time after).
    """
    shared = _FITS.table()
    if shared is None:
        return fit_pairwise_logistic(Z, length, target)
    key = content_key(Z, length, target)
    if key not in shared:
        shared[key] = fit_pairwise_logistic(Z, length, target)
    return shared[key].copy()


def _fit_nonlinear(learner, X, Z, mu, sd, tab, target, train, table_of, budget, seed):
    if learner == "mlp":
        view = SimpleNamespace(
            factors=Z,
            case_haystack=train.cases.case_haystack,
            gold_case=train.cases.gold_case,
            gold_pos=train.cases.gold_pos,
            length=train.cases.length,
        )
        net = fit_mlp(view, np.ones(Z.shape[-1], bool), epochs=budget["epochs"], seed=seed)

        def score(data):
            with single_thread():
                return net(((table_of(data).values - mu) / sd).astype(np.float32))

        return score, None
    gbm = fit_gbm_ranker(X, tab.length, target, seed=seed, max_iter=budget["gbm_iter"])

    def score(data):
        with single_thread():
            return gbm(table_of(data).values)

    return score, None


def paper_weights(train: CueData, keep_fraction: float, seed: int, quick: bool) -> np.ndarray:
    """Learn the paper's value (seven factors, Algorithm 1) on ``train`` and return its float32 weights."""
    n_iter = learner_budget(quick)["n_iter"] if quick else N_ITER
    res = hill_climb(
        RetentionEvaluator(train.cases, keep_fraction).objective,
        train.cases.live_factors,
        n_iter=n_iter,
        restarts=1 if quick else RESTARTS,
        seed=seed,
    )
    return res.weights.astype(np.float32)


def _paper_scores(train: CueData, test: CueData, keep_fraction: float, seed: int, quick: bool) -> np.ndarray:
    """Score on ``test`` the paper's value learned on ``train`` (:func:`paper_weights`)."""
    return LinearValue(paper_weights(train, keep_fraction, seed, quick)).score(test.cases)


def _table_of(calibrated: bool, model: str):
    """Return a ``table_of`` for :func:`fit_cue_model`: the table of ``model`` (raw or calibrated cues)."""
    return lambda data: data.table(calibrated, model)


__all__ = [
    "LEARNERS",
    "LINEAR_LEARNERS",
    "MODEL_LEARNERS",
    "NONLINEAR_LEARNERS",
    "PAPER_MODEL",
    "fit_cue_model",
    "learner_budget",
    "paper_weights",
    "shared_fits",
    "single_thread",
    "surrogate_weights",
]
