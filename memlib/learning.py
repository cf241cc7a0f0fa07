"""Learning a memory value from the retention objective: the weight search and the fits over any features.

This module holds the gradient-free learners of the factor weights
(:func:`hill_climb`, Algorithm 1 of the paper, with restarts; the released
experiment's :func:`hill_climb_released`; :func:`cma_es`; and the signed
:func:`hill_climb_signed` and :func:`cma_es_signed`), and the fits of a value
over any features (:func:`retention_mass`, :func:`fit_pairwise_logistic`,
:func:`fit_gbm_ranker`, :func:`fit_cue_value`). The MLP value of the paper's
ablation lives in :mod:`memlib.value_net`; :func:`fit_mlp` and
:func:`fit_mlp_released` are re-exported here.

The return ``R(w)`` is any callable from a weight vector to a scalar to be
maximised (here: mean gold retention on training cases, see
:class:`memlib.metrics.RetentionEvaluator`). Only the *live* factors are
searched; the others keep weight 0, so a factor that is identically zero in
the data can never receive an arbitrary weight.

Algorithm 1, per restart:

1. ``w <- 1`` on the live factors (restart 0); later restarts start from
   ``Uniform(0, 2)`` draws so they explore other basins.
2. ``R* <- R(w)``; ``sigma <- sigma0``.
3. For ``t = 1..n_iter``: each live factor is perturbed with probability 0.5 by
   ``N(0, sigma)`` and clipped at 0; the proposal is accepted only on a
   **strict** improvement; then ``sigma <- gamma * sigma``.

The best restart (highest training return, earliest on ties) is returned. The
best-so-far return of every restart is non-decreasing by construction.

>>> import numpy as np
>>> live = np.array([True, True, False, False, False, False, False])
>>> target = np.array([0.2, 1.5, 0, 0, 0, 0, 0])
>>> res = hill_climb(lambda w: -np.sum((w - target) ** 2), live, n_iter=400, seed=0)
>>> bool(np.all(np.diff(res.history[0]) >= 0)), float(res.weights[2])
(True, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError, check_int, check_positive
from memlib.value_net import fit_mlp, fit_mlp_released  # noqa: F401 - re-exported: memlib.learning.fit_mlp

#: Default search settings (the paper does not publish T, sigma0 or gamma). On LoCoMo, 300
#: iterations x 3 restarts reached the same training return as these (benchmarks/objective.py).
N_ITER = 200
SIGMA0 = 0.5
GAMMA = 0.99
RESTARTS = 2


@dataclass
class LearnResult:
    """Outcome of :func:`hill_climb`.

    Attributes
    ----------
    weights : ndarray, shape (7,)
        Best weights found (0 on dead factors).
    train_return : float
        ``R(weights)``.
    history : list of ndarray
        Best-so-far return after each iteration (index 0 = initial), per restart.
    restart_returns : list of float
        Final return of each restart.
    n_evaluations : int
        Number of calls to the objective.
    """

    weights: np.ndarray
    train_return: float
    history: list
    restart_returns: list
    n_evaluations: int


def hill_climb(
    objective,
    live,
    n_iter: int = N_ITER,
    sigma0: float = SIGMA0,
    gamma: float = GAMMA,
    restarts: int = RESTARTS,
    seed: int = 0,
) -> LearnResult:
    """Maximise ``objective(w)`` over non-negative weights on the live factors.

    Parameters
    ----------
    objective : callable
        Maps a (7,) weight vector to a float to maximise.
    live : array_like of bool, shape (7,)
        Factors that may receive weight.
    n_iter, sigma0, gamma, restarts, seed
        Iterations per restart, initial step, annealing factor in (0, 1],
        number of restarts (>= 1) and the random seed.
    """
    live = np.asarray(live, dtype=bool)
    if live.shape != (len(FACTORS),):
        raise ParameterError(f"live must be a boolean mask of length {len(FACTORS)}")
    if not live.any():
        raise ParameterError("no live factor to learn: every factor is identically zero in the data")
    idx = np.flatnonzero(live)

    def start(restart, rng, sigma0):
        w = np.zeros(len(FACTORS))
        w[idx] = 1.0 if restart == 0 else rng.uniform(0.0, 2.0, size=len(idx))
        return w

    return _climb(objective, start, idx, n_iter, sigma0, gamma, restarts, seed, lower=0.0)


#: The released experiment's learner settings (``borge/memory/value.py``, called with ``iters=120`` and
#: ``seed=1`` for every split).
RELEASED_LEARNER = {"n_iter": 120, "sigma0": 0.5, "gamma": 0.92, "seed": 1}


def hill_climb_released(objective, live, n_iter: int = 120, sigma0: float = 0.5, gamma: float = 0.92, seed: int = 1):
    """Algorithm 1 as the authors' released experiment runs it, draw for draw.

    One climb from 1.0 on every live factor. Each iteration visits the live
    factors in factor order and, with probability 1/2 (a draw of Python's
    ``random.Random(seed)``), moves it by a Gaussian step of scale ``sigma``
    (the same generator's ``gauss``), clipped at 0; the candidate is kept when
    the objective strictly improves, and ``sigma`` shrinks by ``gamma``. An
    iteration that moves no factor still evaluates the (unchanged) candidate.
    memlib's own :func:`hill_climb` differs in its generator, its settings
    (:data:`N_ITER`, :data:`GAMMA`) and its random restarts.

    >>> r = hill_climb_released(lambda w: -abs(w[0] - 2.0), np.eye(7, dtype=bool)[0], n_iter=200)
    >>> round(float(r.weights[0]), 2), r.n_evaluations
    (2.0, 201)
    """
    import random

    live = np.asarray(live, dtype=bool)
    if live.shape != (len(FACTORS),) or not live.any():
        raise ParameterError(f"live must be a boolean mask of length {len(FACTORS)} with a live factor")
    n_iter = check_int("n_iter", n_iter, minimum=1)
    sigma = check_positive("sigma0", sigma0)
    gamma = check_positive("gamma", gamma)
    rng = random.Random(check_int("seed", seed, minimum=0))
    idx = np.flatnonzero(live)
    w = np.zeros(len(FACTORS))
    w[idx] = 1.0
    best = float(objective(w))
    hist = [best]
    for _ in range(n_iter):
        cand = w.copy()
        for j in idx:
            if rng.random() < 0.5:
                cand[j] = max(0.0, cand[j] + rng.gauss(0.0, sigma))
        r = float(objective(cand))
        if r > best:
            w, best = cand, r
        hist.append(best)
        sigma *= gamma
    return LearnResult(w, best, [np.array(hist)], [best], n_iter + 1)


def _climb(objective, start, idx, n_iter, sigma0, gamma, restarts, seed, lower=None) -> LearnResult:
    """Algorithm 1's loop and the checks of its settings, shared by :func:`hill_climb` and :func:`hill_climb_signed`.

    Each restart begins at ``start(restart, rng, sigma0)`` (``rng`` is the search's generator,
    seeded by ``seed``); each step perturbs a random half of the weights at ``idx`` (clipped
    below at ``lower`` unless it is None) and keeps the step when the objective strictly
    improves; ``sigma`` anneals by ``gamma``.
    """
    n_iter = check_int("n_iter", n_iter, minimum=1)
    restarts = check_int("restarts", restarts, minimum=1)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    sigma0 = check_positive("sigma0", sigma0)
    gamma = check_positive("gamma", gamma)
    if gamma > 1:
        raise ParameterError(f"gamma must be in (0, 1], got {gamma}")
    best_w, best_r = None, -np.inf
    histories, finals, n_eval = [], [], 0
    for restart in range(restarts):
        w = start(restart, rng, sigma0)
        r_star = float(objective(w))
        n_eval += 1
        sigma = sigma0
        hist = np.empty(n_iter + 1)
        hist[0] = r_star
        for t in range(1, n_iter + 1):
            flip = rng.random(len(idx)) < 0.5
            step = rng.normal(0.0, sigma, size=len(idx))
            if flip.any():
                w_new = w.copy()
                moved = w[idx[flip]] + step[flip]
                w_new[idx[flip]] = moved if lower is None else np.maximum(lower, moved)
                r_new = float(objective(w_new))
                n_eval += 1
                if r_new > r_star:
                    w, r_star = w_new, r_new
            hist[t] = r_star
            sigma *= gamma
        histories.append(hist)
        finals.append(r_star)
        if r_star > best_r:
            best_w, best_r = w, r_star
    return LearnResult(best_w, best_r, histories, finals, n_eval)


def cma_es(objective, live, max_evals: int = N_ITER * RESTARTS, sigma0: float = SIGMA0, seed: int = 0) -> LearnResult:
    """Maximise ``objective(w)`` with CMA-ES (the ``cma`` package) over the live factors.

    The paper names CMA-ES as the stronger optimiser its hill-climb stands in for
    (its limitation L5). The search starts from uniform weights, keeps every
    weight >= 0 (``cma``'s bound handling) and stops after ``max_evals``
    evaluations (default: the hill-climb's budget). Dead factors stay at 0.

    >>> import numpy as np
    >>> live = np.array([True, True, False, False, False, False, False])
    >>> res = cma_es(lambda w: -np.sum((w - [0.2, 1.5, 0, 0, 0, 0, 0]) ** 2), live, max_evals=300)
    >>> np.round(res.weights[:3], 1).tolist(), bool(np.all(np.diff(res.history[0]) >= 0))
    ([0.2, 1.5, 0.0], True)
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # cma warns when matplotlib is absent
        import cma

    live = np.asarray(live, dtype=bool)
    if live.shape != (len(FACTORS),) or not live.any():
        raise ParameterError("cma_es needs a boolean mask of length 7 with at least one live factor")
    max_evals = check_int("max_evals", max_evals, minimum=2)
    seed = check_int("seed", seed, minimum=0)
    sigma0 = check_positive("sigma0", sigma0)
    idx = np.flatnonzero(live)
    best = {"r": -np.inf, "w": None}
    history = []

    def weights_of(x):
        w = np.zeros(len(FACTORS))
        w[idx] = np.maximum(np.asarray(x, dtype=float), 0.0)
        return w

    def loss(x):
        w = weights_of(x)
        r = float(objective(w))
        if r > best["r"]:
            best["r"], best["w"] = r, w
        history.append(best["r"])
        return -r

    if len(idx) == 1:  # CMA-ES needs two dimensions; one weight only scales the ranking
        loss([1.0])
    else:
        es = cma.CMAEvolutionStrategy(
            np.ones(len(idx)), sigma0, {"bounds": [0, None], "seed": seed + 1, "maxfevals": max_evals, "verbose": -9}
        )
        es.optimize(loss)
    return LearnResult(best["w"], best["r"], [np.asarray(history)], [best["r"]], len(history))


# --------------------------------------------------------------------------- learners over any features
# The functions below learn a value over any number of features (e.g. the cues of memlib.cues), with
# signed weights: a feature whose high values mark turns that are not needed gets a negative weight.


def retention_mass(cases) -> np.ndarray:
    """How much retention each turn carries: ``t[g, n] = sum over cases c on g with n gold of 1 / |gold_c|``.

    Keeping turn ``n`` of history ``g`` adds ``t[g, n]`` to the summed retention of the cases
    on ``g`` (cases without gold carry nothing). ``cases`` is a :class:`~memlib.cases.CaseSet`.

    >>> from memlib.cases import CaseSet
    >>> cs = CaseSet.from_haystacks([np.zeros((3, 7))], [np.zeros(3)], [0, 0], gold=[[0], [0, 2]])
    >>> retention_mass(cs).tolist()
    [[1.5, 0.0, 0.5]]
    """
    G, N = cases.time.shape
    t = np.zeros(G * N)
    w = 1.0 / np.maximum(cases.n_gold[cases.gold_case], 1)
    np.add.at(t, cases.case_haystack[cases.gold_case] * N + cases.gold_pos, w)
    return t.reshape(G, N)


def _standardise(X: np.ndarray, valid: np.ndarray):
    """Column mean and std over the real turns (std 1 for a constant column)."""
    real = X[valid].astype(np.float64)
    mu = real.mean(axis=0) if len(real) else np.zeros(X.shape[-1])
    sd = real.std(axis=0) if len(real) else np.ones(X.shape[-1])
    return mu, np.where(sd > 1e-12, sd, 1.0)


def fit_pairwise_logistic(X, length, target, l2: float = 1e-3, w0=None) -> np.ndarray:
    """Signed linear weights from a pairwise logistic loss, gold against non-gold turns of each history.

    The convex surrogate of gold retention. For every history ``g``, every turn ``p`` that
    carries retention (``target[g, p] > 0``) is paired with every turn ``j`` that carries none;
    the loss is ``sum_g sum_p target[g, p] * mean_j softplus(s_j - s_p) / sum(target)`` with
    ``s = X @ w`` on columns standardised over the real turns, plus ``l2 * |w|^2``. It is
    minimised by L-BFGS (scipy) from ``w = 0``: deterministic, no seed. Weights are returned in
    the units of ``X`` (one unit of feature ``k`` adds ``w[k]`` to the value).

    Parameters
    ----------
    X : ndarray, shape (G, N, K)
    length : ndarray, shape (G,)
        Real turns per history (padding rows are ignored).
    target : ndarray, shape (G, N)
        Retention mass of each turn, e.g. :func:`retention_mass`.
    l2 : float
        Ridge penalty on the standardised weights.
    w0 : array_like, shape (K,), optional
        A start in the units of ``X`` (e.g. the fit on the full data, for bootstrap refits);
        the minimum is the same, only reached in fewer steps.

    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20, 30, 3))
    >>> target = (X[..., 0] - X[..., 2] > 1.5).astype(float)
    >>> w = fit_pairwise_logistic(X, np.full(20, 30), target)
    >>> bool(w[0] > 0 > w[2]), bool(abs(w[1]) < 0.3 * w[0])
    (True, True)
    """
    from scipy.optimize import minimize

    X = np.asarray(X, dtype=np.float64)
    G, N, K = X.shape
    valid = np.arange(N)[None, :] < np.asarray(length)[:, None]
    target = np.where(valid, np.asarray(target, dtype=np.float64), 0.0)
    mu, sd = _standardise(X, valid)
    Z = ((X - mu) / sd).reshape(G * N, K)
    pos_list, neg_list, wt_list = [], [], []
    for g in range(G):
        n = int(length[g])
        p = np.flatnonzero(target[g, :n] > 0)
        j = np.flatnonzero(target[g, :n] == 0)
        if not len(p) or not len(j):
            continue
        pos_list.append(np.repeat(g * N + p, len(j)))
        neg_list.append(np.tile(g * N + j, len(p)))
        wt_list.append(np.repeat(target[g, p] / len(j), len(j)))
    if not pos_list:
        raise ParameterError("no history has both a turn with retention and one without: nothing to learn")
    pi, ni, wt = np.concatenate(pos_list), np.concatenate(neg_list), np.concatenate(wt_list)
    wt = wt / wt.sum()
    M = G * N

    def loss(w):
        s = Z @ w
        d = s[ni] - s[pi]
        e = np.exp(-np.abs(d))  # softplus and sigmoid from one exp (np.logaddexp is ~10x slower)
        f = float(wt @ (np.maximum(d, 0.0) + np.log1p(e))) + l2 * float(w @ w)
        c = wt * np.where(d >= 0, 1.0, e) / (1.0 + e)  # d softplus(d) / dd = sigmoid(d)
        coef = np.bincount(ni, weights=c, minlength=M) - np.bincount(pi, weights=c, minlength=M)
        return f, Z.T @ coef + 2.0 * l2 * w

    start = np.zeros(K) if w0 is None else np.asarray(w0, dtype=np.float64) * sd
    res = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9})
    return res.x / sd


def hill_climb_signed(
    objective,
    w0,
    n_iter: int = N_ITER,
    sigma0: float = SIGMA0,
    gamma: float = GAMMA,
    restarts: int = 1,
    seed: int = 0,
) -> LearnResult:
    """Algorithm 1 over signed weights of any length, started from ``w0``.

    As :func:`hill_climb`, but weights may be negative (no clipping at 0) and the
    search starts from ``w0`` scaled to a largest absolute weight of 1 (ranking by
    ``X @ w`` does not depend on the scale of ``w``, so ``sigma0`` is relative to it).
    Later restarts start from ``w0`` plus ``N(0, sigma0)`` noise.

    >>> res = hill_climb_signed(lambda w: -np.sum((w - [0.5, -1.0]) ** 2), [1.0, 1.0], n_iter=400)
    >>> np.round(res.weights, 1).tolist()
    [0.5, -1.0]
    >>> hill_climb_signed(lambda w: 0.0, [1.0], gamma=1.5)   # the settings are checked as hill_climb's are
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: gamma must be in (0, 1], got 1.5
    """
    w0 = np.asarray(w0, dtype=float)
    scale = np.max(np.abs(w0)) if np.any(w0) else 1.0
    w0 = w0 / scale if np.any(w0) else np.ones_like(w0)

    def start(restart, rng, sigma0):
        return w0.copy() if restart == 0 else w0 + rng.normal(0.0, sigma0, size=len(w0))

    return _climb(objective, start, np.arange(len(w0)), n_iter, sigma0, gamma, restarts, seed)


def cma_es_signed(objective, w0, max_evals: int = N_ITER * RESTARTS, sigma0: float = SIGMA0, seed: int = 0):
    """CMA-ES (the ``cma`` package) over signed weights of any length, started from ``w0``.

    As :func:`cma_es` without bounds; ``w0`` is scaled to a largest absolute weight of 1.

    >>> res = cma_es_signed(lambda w: -np.sum((w - [0.5, -1.0]) ** 2), [1.0, 1.0], max_evals=300)
    >>> np.round(res.weights, 1).tolist()
    [0.5, -1.0]
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        import cma

    max_evals = check_int("max_evals", max_evals, minimum=2)
    seed = check_int("seed", seed, minimum=0)
    w0 = np.asarray(w0, dtype=float)
    w0 = w0 / np.max(np.abs(w0)) if np.any(w0) else np.ones_like(w0)
    best = {"r": -np.inf, "w": w0}
    history = []

    def loss(x):
        r = float(objective(np.asarray(x, dtype=float)))
        if r > best["r"]:
            best["r"], best["w"] = r, np.asarray(x, dtype=float).copy()
        history.append(best["r"])
        return -r

    if len(w0) == 1:
        loss(w0)
    else:
        es = cma.CMAEvolutionStrategy(w0, sigma0, {"seed": seed + 1, "maxfevals": max_evals, "verbose": -9})
        es.optimize(loss)
    return LearnResult(best["w"], best["r"], [np.asarray(history)], [best["r"]], len(history))


def fit_gbm_ranker(X, length, target, seed: int = 0, max_iter: int = 200):
    """Fit a gradient-boosted value (scikit-learn ``HistGradientBoostingClassifier``) over any features.

    The non-linear ceiling of a linear value over the same features. Each real turn is one
    sample, labelled by whether it carries retention (``target > 0``); turns with retention are
    weighted by it, the others so that each history's two classes weigh the same (the
    weighting of :func:`fit_pairwise_logistic`). Default settings otherwise (no early stopping,
    so the fit is deterministic for a seed).

    Returns
    -------
    callable
        ``score(X)`` mapping an array (..., K) to scores (...): the log-odds of carrying retention.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    X = np.asarray(X, dtype=np.float32)
    G, N, K = X.shape
    valid = np.arange(N)[None, :] < np.asarray(length)[:, None]
    target = np.where(valid, np.asarray(target, dtype=np.float64), 0.0)
    y = target > 0
    mass = target.sum(axis=1)
    n_neg = np.maximum((valid & ~y).sum(axis=1), 1)
    sw = np.where(y, target, (mass / n_neg)[:, None])
    keep = valid & (sw > 0)
    model = HistGradientBoostingClassifier(max_iter=max_iter, early_stopping=False, random_state=seed)
    model.fit(X[keep], y[keep], sample_weight=sw[keep])

    def score(Xq) -> np.ndarray:
        Xq = np.asarray(Xq, dtype=np.float32)
        return model.decision_function(Xq.reshape(-1, K)).reshape(Xq.shape[:-1])

    return score


def fit_cue_value(parts, interactions: bool = False, l2: float = 1e-3, info: dict | None = None):
    """Learn a :class:`memlib.value.CueValue` by the pairwise surrogate, each dataset weighing the same.

    Parameters
    ----------
    parts : list of (X, length, target)
        One entry per dataset: store cues ``X`` of shape (G, N, 11) (:data:`memlib.cues.STORE_CUES`,
        padding rows ignored), real turns per history, and the retention mass of each turn
        (:func:`retention_mass`). Each dataset's mass is scaled to sum to 1, so a corpus of 477
        histories and one of 10 count alike.
    interactions : bool
        Also learn a weight for each cue times ``is_user``.
    l2 : float
        Ridge penalty of :func:`fit_pairwise_logistic`.

    Returns
    -------
    CueValue
        With ``quantiles`` of its value over the training turns (the mean of each dataset's
        percentiles, so again each dataset counts alike).

    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((30, 20, 11))
    >>> target = (X[..., 7] > 0.8).astype(float)   # the longer turns carry the evidence
    >>> cv = fit_cue_value([(X, np.full(30, 20), target)])
    >>> cv.feature_names[int(np.argmax(cv.weights))]
    'length'
    """
    from memlib.value import CueValue

    if not parts:
        raise ParameterError("fit_cue_value needs at least one dataset")
    probe = CueValue(np.zeros(11 + (10 if interactions else 0)), interactions)
    feats, lengths, targets = [], [], []
    N = max(int(np.asarray(X).shape[1]) for X, _, _ in parts)
    for j, (X, length, target) in enumerate(parts):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[2] != len(probe.cues):
            raise ParameterError(f"dataset {j}: store cues must have shape (G, N, {len(probe.cues)}), got {X.shape}")
        G, n = X.shape[:2]
        F = probe.features(X.reshape(-1, X.shape[2])).reshape(G, n, -1)
        t = np.asarray(target, dtype=np.float64)
        if t.sum() <= 0:
            raise ParameterError(f"dataset {j}: no turn carries retention mass")
        feats.append(np.pad(F, ((0, 0), (0, N - n), (0, 0))))
        targets.append(np.pad(t / t.sum(), ((0, 0), (0, N - n))))
        lengths.append(np.asarray(length))
    w = fit_pairwise_logistic(np.concatenate(feats), np.concatenate(lengths), np.concatenate(targets), l2=l2)
    qs = []
    for F, length in zip(feats, lengths):
        valid = np.arange(N)[None, :] < length[:, None]
        qs.append(np.percentile(F[valid] @ w, np.arange(101)))
    return CueValue(w, interactions, np.maximum.accumulate(np.mean(qs, axis=0)), info)
