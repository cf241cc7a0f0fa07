"""The cue study's fits made faster give the same numbers, to the bit, as the direct computations they replace."""

from types import SimpleNamespace

import numpy as np
import pytest

from memlib import feature_fits as ff
from memlib.studies import cue_learners as L
from memlib.value_net import fit_mlp


def direct_loss(Z, target, length, l2):
    """The pairwise loss as first written: every pair's two scores gathered, then summed by bincount."""
    G, N = target.shape
    pos, neg, wts = [], [], []
    for g in range(G):
        p = np.flatnonzero(target[g, : length[g]] > 0)
        j = np.flatnonzero(target[g, : length[g]] == 0)
        if len(p) and len(j):
            pos.append(np.repeat(g * N + p, len(j)))
            neg.append(np.tile(g * N + j, len(p)))
            wts.append(np.repeat(target[g, p] / len(j), len(j)))
    pi, ni, wt = np.concatenate(pos), np.concatenate(neg), np.concatenate(wts)
    wt = wt / wt.sum()

    def loss(w):
        s = Z @ w
        d = s[ni] - s[pi]
        e = np.exp(-np.abs(d))
        f = float(wt @ (np.maximum(d, 0.0) + np.log1p(e))) + l2 * float(w @ w)
        c = wt * np.where(d >= 0, 1.0, e) / (1.0 + e)
        coef = np.bincount(ni, weights=c, minlength=G * N) - np.bincount(pi, weights=c, minlength=G * N)
        return f, Z.T @ coef + 2.0 * l2 * w

    return loss


@pytest.mark.parametrize("seed", range(6))
def test_pairwise_loss_is_the_direct_loss_to_the_bit(seed):
    rng = np.random.default_rng(seed)
    G, N, K = int(rng.integers(1, 6)), int(rng.integers(2, 60)), int(rng.integers(1, 6))
    length = rng.integers(1, N + 1, size=G)
    target = (rng.random((G, N)) < 0.3) * rng.random((G, N))
    target[0, :2] = (1.0, 0.0)  # at least one history with both kinds of turn
    length[0] = max(length[0], 2)
    target = np.where(np.arange(N)[None, :] < length[:, None], target, 0.0)
    Z = rng.normal(size=(G * N, K))
    fast = ff._pairwise_loss(Z, ff._pairs(target, length), 1e-3)
    direct = direct_loss(Z, target, length, 1e-3)
    for scale in (0.0, 1.0, 30.0):  # 30: pairs far on both sides of 0
        w = rng.normal(size=K) * scale
        (f1, g1), (f2, g2) = fast(w), direct(w)
        assert f1 == f2 and np.array_equal(g1, g2)


def test_pairs_refuse_data_with_nothing_to_learn():
    with pytest.raises(ff.ParameterError, match="nothing to learn"):
        ff._pairs(np.ones((2, 3)), [3, 3])


def test_shared_fits_fit_each_table_once_and_change_nothing(monkeypatch):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(4, 12, 3)).astype(np.float32)
    length, target = np.full(4, 12), (rng.random((4, 12)) < 0.3).astype(float)
    alone = L.surrogate_weights(Z, length, target)
    calls = []
    fit = L.fit_pairwise_logistic
    monkeypatch.setattr(L, "fit_pairwise_logistic", lambda *a: calls.append(1) or fit(*a))
    with L.shared_fits():
        first = L.surrogate_weights(Z, length, target)
        first[0] += 1.0  # a caller's change to its copy does not reach the next caller
        again = L.surrogate_weights(Z.copy(), length.copy(), target.copy())
        other = L.surrogate_weights(Z[:3], length[:3], target[:3])
    assert len(calls) == 2 and np.array_equal(again, alone) and not np.array_equal(other, alone)
    L.surrogate_weights(Z, length, target)  # outside the block: fit again
    assert len(calls) == 3


def direct_mlp_draws(cases, n_negatives, epochs, seed, F):
    """Each epoch's negative rows, picked as first written (two-index gather): what the network is fed."""
    rng = np.random.default_rng(seed)
    gh, gp, N = cases.case_haystack[cases.gold_case], cases.gold_pos, cases.factors.shape[1]
    is_gold = np.zeros((len(cases.case_haystack), N), dtype=bool)
    is_gold[cases.gold_case, gp] = True
    out = []
    for _ in range(epochs):
        neg = (rng.random((len(gp), n_negatives)) * cases.length[gh][:, None]).astype(np.int64)
        ok = ~is_gold[cases.gold_case[:, None], neg]
        rows = np.repeat(np.arange(len(gp)), n_negatives)[ok.ravel()]
        out.append(F[gh[rows], neg.ravel()[ok.ravel()]])
    return out


def test_fit_mlp_feeds_the_network_the_rows_the_direct_gather_picks(monkeypatch):
    import torch

    rng = np.random.default_rng(1)
    G, N = 6, 15
    factors = rng.random((G, N, 5)).astype(np.float32)
    cases = SimpleNamespace(
        factors=factors,
        case_haystack=np.array([0, 1, 2, 3, 4, 5, 0]),
        gold_case=np.array([0, 0, 1, 2, 3, 4, 5, 6]),
        gold_pos=np.array([1, 4, 2, 0, 7, 3, 9, 5]),
        length=np.array([15, 12, 9, 15, 10, 14]),
    )
    columns = np.array([True, False, True, True, True])
    fed = []
    real_select = torch.index_select
    monkeypatch.setattr(torch, "index_select", lambda *a: fed.append(real_select(*a)) or fed[-1])
    fit_mlp(cases, columns, epochs=5, seed=4)
    F = torch.from_numpy(np.ascontiguousarray(factors[..., columns]))
    expected = direct_mlp_draws(cases, 16, 5, 4, F)
    assert len(fed) == 5 and all(torch.equal(a, b) for a, b in zip(fed, expected))
