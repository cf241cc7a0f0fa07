"""Fits of a memory value over any features, from the retention objective, with signed weights.

The paper learns non-negative weights on its seven factors (:mod:`memlib.learning`). The
functions here learn a value over any number of features (e.g. the cues of :mod:`memlib.cues`)
with signed weights: a feature whose high values mark turns that are not needed gets a negative
weight. :func:`retention_mass` is what each turn carries of the objective;
:func:`fit_pairwise_logistic` its convex surrogate, :func:`fit_gbm_ranker` a non-linear
ceiling, and :func:`fit_cue_value` the store's default value (:class:`memlib.value.CueValue`).
"""

from __future__ import annotations

import numpy as np

from memlib._checks import ParameterError


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


def standardise(X: np.ndarray, valid: np.ndarray):
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
    mu, sd = standardise(X, valid)
    Z = ((X - mu) / sd).reshape(G * N, K)
    loss = _pairwise_loss(Z, _pairs(target, length), l2)
    start = np.zeros(K) if w0 is None else np.asarray(w0, dtype=np.float64) * sd
    res = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9})
    return res.x / sd


def _pairs(target: np.ndarray, length) -> list:
    """List the pairs of :func:`fit_pairwise_logistic`, history by history.

    One ``(pos, neg, weight)`` per history with both kinds of turn: the flat rows (``g * N + n``)
    of the turns that carry retention and of those that carry none, and each pair's weight
    ``target[g, p] / len(neg)``, pairs in the order ``(p0, j0), (p0, j1), ..., (p1, j0), ...``.

    >>> [(p.tolist(), j.tolist(), w.tolist()) for p, j, w in _pairs(np.array([[0.5, 0.0, 1.0, 0.0]]), [3])]
    [([0, 2], [1], [0.5, 1.0])]
    """
    G, N = target.shape
    out = []
    for g in range(G):
        n = int(length[g])
        p = np.flatnonzero(target[g, :n] > 0)
        j = np.flatnonzero(target[g, :n] == 0)
        if len(p) and len(j):
            out.append((g * N + p, g * N + j, np.repeat(target[g, p] / len(j), len(j))))
    if not out:
        raise ParameterError("no history has both a turn with retention and one without: nothing to learn")
    return out


def _pairwise_loss(Z: np.ndarray, pairs: list, l2: float):
    """Return the loss and gradient of :func:`fit_pairwise_logistic` at ``w`` (standardised units), as one closure.

    Everything that does not depend on ``w`` (the pairs, their weights, the work arrays) is set up
    once here. Each pair's score difference is written history by history as an outer difference
    (the same numbers, in the same order, as gathering both scores of every pair), and every sum is
    the one a direct evaluation takes, so the loss and gradient are the same to the bit.

    >>> Z = np.array([[1.0], [0.0], [2.0], [0.0]])
    >>> f, grad = _pairwise_loss(Z, _pairs(np.array([[1.0, 0.0, 0.0, 1.0]]), [4]), 0.0)(np.array([1.0]))
    >>> d = np.array([-1.0, 1.0, 0.0, 2.0])  # s_j - s_p of the pairs (0, 1), (0, 2), (3, 1), (3, 2)
    >>> bool(np.isclose(f, np.mean(np.logaddexp(0.0, d))))
    True
    """
    M = Z.shape[0]
    pi = np.concatenate([np.repeat(p, len(j)) for p, j, _ in pairs])
    ni = np.concatenate([np.tile(j, len(p)) for p, j, _ in pairs])
    wt = np.concatenate([w for _, _, w in pairs])
    wt = wt / wt.sum()
    ends = np.cumsum([len(p) * len(j) for p, j, _ in pairs])
    blocks = [(int(b - len(p) * len(j)), int(b), p, j) for (p, j, _), b in zip(pairs, ends)]
    d, e, t, u = (np.empty(len(wt)) for _ in range(4))
    ahead = np.empty(len(wt), dtype=bool)

    def loss(w):
        s = Z @ w
        for a, b, p, j in blocks:  # d = s[ni] - s[pi]
            np.subtract(s[j][None, :], s[p][:, None], out=d[a:b].reshape(len(p), len(j)))
        np.exp(np.negative(np.abs(d, out=e), out=e), out=e)  # softplus and sigmoid from one exp
        np.add(np.maximum(d, 0.0, out=u), np.log1p(e, out=t), out=t)  # softplus(d)
        f = float(wt @ t) + l2 * float(w @ w)
        np.copyto(t, e)
        np.copyto(t, 1.0, where=np.greater_equal(d, 0, out=ahead))  # d softplus(d) / dd = sigmoid(d)
        np.divide(np.multiply(wt, t, out=t), np.add(e, 1.0, out=u), out=t)
        coef = np.bincount(ni, weights=t, minlength=M) - np.bincount(pi, weights=t, minlength=M)
        return f, Z.T @ coef + 2.0 * l2 * w

    return loss


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
        One entry per dataset: store cues ``X`` of shape (G, N, 12) (:data:`memlib.cues.STORE_CUES`,
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
    >>> X = rng.random((30, 20, 12))
    >>> target = (X[..., 7] > 0.8).astype(float)   # the longer turns carry the evidence
    >>> cv = fit_cue_value([(X, np.full(30, 20), target)])
    >>> cv.feature_names[int(np.argmax(cv.weights))]
    'length'
    """
    from memlib.cues import STORE_CUES
    from memlib.value import CueValue

    if not parts:
        raise ParameterError("fit_cue_value needs at least one dataset")
    n = len(STORE_CUES)
    probe = CueValue(np.zeros(n + (n - 1 if interactions else 0)), interactions)
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
