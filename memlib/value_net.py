"""The MLP value ``g_theta(f)`` of the paper's ablation, learned by a pairwise logistic ranking loss.

A small network from the factors of a turn to a score, trained so that the gold
turns of each case score above the other turns of its history (the ranking
surrogate of gold retention). Two fits: memlib's own (:func:`fit_mlp`, a few
negatives sampled per gold turn each epoch) and the released experiment's
(:func:`fit_mlp_released`, every gold-non-gold pair, weight decay, seed 1).
Both train full-batch with Adam on the CPU and return a scoring function; both
are re-exported by :mod:`memlib.learning`.

>>> from memlib.cases import CaseSet
>>> rng = np.random.default_rng(0)
>>> F = [rng.random((10, 7)) for _ in range(20)]
>>> gold = [[int(np.argmax(f[:, 1]))] for f in F]   # the gold turn has the largest goal relevance
>>> cases = CaseSet.from_haystacks(F, [np.arange(10.0)] * 20, list(range(20)), gold=gold)
>>> score = fit_mlp(cases, np.ones(7, dtype=bool), epochs=100)
>>> s = score(np.stack(F))
>>> s.shape, float(np.mean(np.argmax(s, axis=1) == [g[0] for g in gold])) >= 0.9
((20, 10), True)
"""

from __future__ import annotations

import numpy as np

from memlib._checks import check_int


def fit_mlp(cases, columns, hidden=(16, 16), epochs: int = 200, lr: float = 0.01, n_negatives: int = 16, seed: int = 0):
    """Train a small MLP value ``g_theta(f)`` with a pairwise logistic ranking loss.

    Within each training case every gold turn is paired with ``n_negatives``
    non-gold turns of the same history (drawn afresh each epoch); the loss is
    ``softplus(-(g(f_gold) - g(f_other)))``, i.e. gold should rank above non-gold.
    Full-batch Adam on the CPU.

    Parameters
    ----------
    cases : CaseSet
        Training cases.
    columns : array_like of bool, shape (7,)
        Factor columns the network reads (the live factors).

    Returns
    -------
    callable
        ``score(factors)`` mapping an array (..., 7) to scores (...).
    """
    import torch

    epochs = check_int("epochs", epochs, minimum=1)
    n_negatives = check_int("n_negatives", n_negatives, minimum=1)
    columns = np.asarray(columns, dtype=bool)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    d = int(columns.sum())
    layers, width = [], d
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, 1))
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    F = torch.from_numpy(np.ascontiguousarray(cases.factors[..., columns], dtype=np.float32))
    gh = cases.case_haystack[cases.gold_case]
    gp = cases.gold_pos
    N = cases.factors.shape[1]
    is_gold = np.zeros((len(cases.case_haystack), N), dtype=bool)  # per case: which positions are its gold
    is_gold[cases.gold_case, gp] = True
    lengths = cases.length[gh]
    F_gold = F[gh, gp]  # each gold turn is scored once per epoch, then paired with its negatives
    # what does not change between epochs, once: each pair's gold row, and the turns as flat rows (a row
    # picked by one flat index is the row F[g, n] picks, copied ten times faster)
    every, F_rows, first_row = np.repeat(np.arange(len(gp)), n_negatives), F.reshape(-1, d), (gh * N)[:, None]
    for _ in range(epochs):
        neg = (rng.random((len(gp), n_negatives)) * lengths[:, None]).astype(np.int64)
        ok = ~is_gold[cases.gold_case[:, None], neg].ravel()
        rows = every[ok]
        s_gold = net(F_gold).squeeze(-1)[torch.from_numpy(rows)]
        s_neg = net(torch.index_select(F_rows, 0, torch.from_numpy((first_row + neg).ravel()[ok]))).squeeze(-1)
        loss = torch.nn.functional.softplus(-(s_gold - s_neg)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()

    def score(factors) -> np.ndarray:
        X = torch.from_numpy(np.ascontiguousarray(np.asarray(factors)[..., columns], dtype=np.float32))
        with torch.no_grad():
            return net(X).squeeze(-1).numpy()

    return score


def fit_mlp_released(cases, columns, hidden=(16, 16), epochs: int = 200, lr: float = 1e-2, weight_decay=1e-3, seed=1):
    """Fit the released experiment's MLP ablation: every gold-non-gold pair of a case, weight decay, seed 1.

    The loss of a case is the mean of ``softplus(-(g(f_gold) - g(f_other)))``
    over *all* its gold and non-gold pairs; the epoch's loss is the mean over
    cases that have both; full-batch Adam with weight decay; ``torch`` seeded
    with ``seed`` before the network is built (``borge/memory/value_net.py``).
    memlib's own :func:`fit_mlp` samples a few negatives per gold turn instead.

    Returns
    -------
    callable
        ``score(factors)`` mapping an array (..., 7) to float64 scores (...).
    """
    import torch

    epochs = check_int("epochs", epochs, minimum=1)
    columns = np.asarray(columns, dtype=bool)
    torch.manual_seed(seed)
    dims = [int(columns.sum()), *hidden, 1]
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)

    C, N = len(cases.case_haystack), cases.factors.shape[1]
    is_gold = np.zeros((C, N), dtype=bool)
    is_gold[cases.gold_case, cases.gold_pos] = True
    real = np.arange(N)[None, :] < cases.length[cases.case_haystack][:, None]
    neg = real & ~is_gold
    ok = is_gold.any(axis=1) & neg.any(axis=1)
    # histories and cases in the order of their content keys, so that no float sum depends on the order
    # of the file (the forward pass, the gradients and the mean over cases all follow it)
    order = np.argsort(cases.haystack_keys(), kind="stable")
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    F = torch.from_numpy(np.ascontiguousarray(cases.factors[order][..., columns], dtype=np.float32))
    used = np.flatnonzero(ok)
    used = used[np.argsort(cases.keys[used].astype(str), kind="stable")]
    hay = torch.from_numpy(place[cases.case_haystack[used]])
    # each usable case's gold positions, padded to the most any case has (pad: position 0, masked out)
    n_gold = is_gold[used].sum(axis=1)
    P = int(n_gold.max()) if len(used) else 0
    gold_pos = np.zeros((len(used), P), dtype=np.int64)
    gold_ok = np.arange(P)[None, :] < n_gold[:, None]
    for i, c in enumerate(used):
        gold_pos[i, : n_gold[i]] = np.flatnonzero(is_gold[c])
    gold_pos, gold_ok = torch.from_numpy(gold_pos), torch.from_numpy(gold_ok)
    neg_mask = torch.from_numpy(neg[used])
    pair_mask = gold_ok[:, :, None] & neg_mask[:, None, :]
    n_pairs = pair_mask.sum(dim=(1, 2)).to(torch.float32)
    for _ in range(epochs if len(used) else 0):
        s = net(F).squeeze(-1)[hay]  # (cases, N): every turn of each case's history
        s_gold = torch.gather(s, 1, gold_pos)  # (cases, P)
        diff = s_gold[:, :, None] - s[:, None, :]  # each gold turn minus each turn of its history
        loss = torch.where(pair_mask, torch.nn.functional.softplus(-diff), 0.0).sum(dim=(1, 2)) / n_pairs
        opt.zero_grad()
        loss.mean().backward()
        opt.step()
    net.eval()

    def score(factors) -> np.ndarray:
        # each distinct factor row once, in sorted order: a row's score does not depend on where it sits
        X = np.ascontiguousarray(np.asarray(factors)[..., columns], dtype=np.float32)
        rows, inverse = np.unique(X.reshape(-1, X.shape[-1]), axis=0, return_inverse=True)
        with torch.no_grad():
            s = net(torch.from_numpy(rows)).squeeze(-1).numpy().astype(np.float64)
        return s[inverse.reshape(-1)].reshape(X.shape[:-1])

    return score
