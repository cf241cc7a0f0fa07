"""Chapter 11: what a user's own references say about what they will need (the adaptive store's evidence).

An agent never has gold labels for its conversations; its user's later turns are the nearest
thing it has. This study asks, per corpus, how well that evidence stands in for the labels:

* :func:`hazard_table`: how the chance of being referred back to falls with age (in sessions),
  beside how the chance of being gold for a question falls with age, each a rate per turn at risk;
* :func:`reference_auc`: whether a turn that later turns refer back to is more often gold, per
  kind of reference (embedding: :data:`memlib.references.THRESHOLD`; lexical: shared rare words);
* :func:`exponent_table`: the need exponent each stream's references give at its end
  (:meth:`memlib.references.Need.exponent`), as the adaptive store reads them.

Everything here reads the turns and the references of each history up to its questions, never a
question, except where gold is scored (the hazard of gold, the AUC's labels).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib._checks import ParameterError
from memlib.metrics import paired_bootstrap
from memlib.references import LAG_EDGES, N_BINS, THRESHOLD, Need, Z, count_references, lag_bins
from memlib.store.replay import session_ends
from memlib.studies.corpora import READS, Corpus, load_corpus
from memlib.studies.data_spec import EACH, DataSpec

#: The corpora the study reads, each on its own.
DATASETS = ("locomo", "longmemeval_s", "realmem")
#: A word is rare in a history when at most this share of its turns hold it (and at least 2 words are shared).
RARE_SHARE = 0.01
_WORD = re.compile(r"[a-z0-9]{3,}")


def _periods(corpus: Corpus, g: int) -> np.ndarray:
    """Return the session (0, 1, ...) of each turn of history ``g``."""
    n = int(corpus.cases.length[g])
    return np.searchsorted(session_ends(corpus.session[g, :n]), np.arange(n), side="right")


def _streams(corpus: Corpus) -> list[int]:
    """One history per group: its longest (a RealMem user's questions share one stream, cut at each)."""
    best: dict = {}
    for c, g in enumerate(corpus.cases.case_haystack):
        grp = corpus.cases.groups[c]
        if grp not in best or corpus.cases.length[g] > corpus.cases.length[best[grp]]:
            best[grp] = int(g)
    return sorted(set(best.values()))


def _bin_labels() -> list[str]:
    edges = [*LAG_EDGES, None]
    return [f"{lo}" if hi == lo + 1 else (f"{lo}-{hi - 1}" if hi else f"{lo}+") for lo, hi in zip(edges, edges[1:])]


def hazard_table(corpus: Corpus) -> pd.DataFrame:
    """Return the rate of references and of gold per turn at risk, by age in sessions, each beside its mean.

    References: every user turn against every turn of an earlier session of its stream (all turns
    seen, whatever a store would hold). Gold: every question against every turn of its history,
    the age counted from the session after the history's last.
    """
    refs, risk, gold, gold_risk = (np.zeros(N_BINS) for _ in range(4))
    for g in _streams(corpus):
        n, per = int(corpus.cases.length[g]), _periods(corpus, g)
        E = corpus.embeddings[corpus.text_id[g, :n]]
        for t in np.flatnonzero(corpus.cues[g, :n, 0] > 0.5):
            before = per < per[t]  # earlier sessions only: a turn of its own session is not referred back to
            r, x = count_references(E[t : t + 1], per[t : t + 1], E[before], per[before])
            refs, risk = refs + r, risk + x
    cs = corpus.cases
    for c in range(cs.n_cases):
        g = cs.case_haystack[c]
        per = _periods(corpus, g)
        asked = per[-1] + 1
        gold += np.bincount(lag_bins(asked - per[cs.gold_pos[cs.gold_case == c]]), minlength=N_BINS)
        gold_risk += np.bincount(lag_bins(asked - per), minlength=N_BINS)
    rows = []
    for kind, events, at_risk in (("references", refs, risk), ("gold", gold, gold_risk)):
        rate = np.divide(events, at_risk, out=np.full(N_BINS, np.nan), where=at_risk > 0)
        overall = events.sum() / max(at_risk.sum(), 1)
        for b, label in enumerate(_bin_labels()):
            rows.append(
                {
                    "dataset": corpus.name,
                    "kind": kind,
                    "sessions_ago": label,
                    "events": int(events[b]),
                    "at_risk": int(at_risk[b]),
                    "rate": rate[b],
                    "relative": rate[b] / overall if overall > 0 else np.nan,
                }
            )
    return pd.DataFrame(rows)


def hazard_agreement(hazard: pd.DataFrame) -> pd.Series:
    """Per corpus, the correlation of the log rates of references and of gold over ages two sessions back or more.

    ``hazard`` is :func:`hazard_table`'s (several corpora stacked). Ages where either rate is
    missing or zero are left out; a corpus with fewer than three ages left is NaN. The previous
    session (age 1) is left out too: topic continuity fills it with references that say little
    about what a later question will reach back for.

    >>> rows = [{"dataset": "d", "kind": k, "sessions_ago": a, "relative": r}
    ...         for k, rs in (("references", (9.0, 4.0, 2.0, 1.0)), ("gold", (1.0, 8.0, 4.0, 2.0)))
    ...         for a, r in zip(("1", "2", "3-4", "5-8"), rs)]
    >>> hazard_agreement(pd.DataFrame(rows)).round(3).to_dict()
    {'d': 1.0}
    """
    out = {}
    hz = hazard.set_index(["dataset", "kind", "sessions_ago"])["relative"].sort_index()
    for d in hazard["dataset"].unique():
        r = hz.loc[(d, "references")].dropna().drop(index="1", errors="ignore")
        g = hz.loc[(d, "gold")].dropna().drop(index="1", errors="ignore")
        common = r.index.intersection(g.index)
        ok = (r[common] > 0) & (g[common] > 0)
        x, y = np.log(r[common][ok].to_numpy(float)), np.log(g[common][ok].to_numpy(float))
        out[d] = float(np.corrcoef(x, y)[0, 1]) if ok.sum() >= 3 else float("nan")
    return pd.Series(out, name="hazard_agreement")


def shared_rare_words(texts: list[str]) -> np.ndarray:
    """``(n, n)`` counts of the words (3 letters or more) two texts share that at most :data:`RARE_SHARE` of them hold.

    >>> int(shared_rare_words(["my dog Rex", "Rex is a dog", "hello"] + ["the dog"] * 297)[0, 1])
    1
    """
    from scipy import sparse

    words = [set(_WORD.findall(t.lower())) for t in texts]
    vocab: dict = {}
    rows, cols = [], []
    for i, ws in enumerate(words):
        for w in ws:
            rows.append(i)
            cols.append(vocab.setdefault(w, len(vocab)))
    M = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(vocab)))
    rare = np.asarray(M.sum(axis=0)).ravel() <= max(1, int(RARE_SHARE * len(texts)))
    M = M[:, np.flatnonzero(rare)]
    return (M @ M.T).toarray().astype(np.int64)


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """AUC of ``scores`` for ``labels`` (ties count one half); NaN without both classes."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return np.nan
    return float(
        ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / pos.size / neg.size
    )


def reference_auc(corpus: Corpus) -> pd.DataFrame:
    """Per question, the AUC of "referred back to" for its gold turns, by kind of reference.

    A turn's count is the later user turns of its history (at least two sessions later: what was
    said in the next session is continuity) that refer back to it: by embedding (cosine at least
    :data:`memlib.references.THRESHOLD`), or lexically (at least two shared words that are rare
    in the history; only when the corpus holds its texts).
    """
    cs = corpus.cases
    rows = []
    for g in np.unique(cs.case_haystack):
        n, per = int(cs.length[g]), _periods(corpus, g)
        ids = corpus.text_id[g, :n]
        user = corpus.cues[g, :n, 0] > 0.5
        later = (per[None, :] - per[:, None] >= 2) & user[None, :]  # [j, t]: t refers back to j
        E = corpus.embeddings[ids]
        emb = ((E @ E.T >= THRESHOLD) & later).sum(axis=1)
        kinds = [("embedding", emb)]
        if corpus.texts is not None:  # a corpus without its texts has no lexical references
            kinds.append(("lexical", ((shared_rare_words([corpus.texts[i] for i in ids]) >= 2) & later).sum(axis=1)))
        for c in np.flatnonzero(cs.case_haystack == g):
            gold = np.zeros(n, bool)
            gold[cs.gold_pos[cs.gold_case == c]] = True
            for kind, count in kinds:
                rows.append(
                    {
                        "dataset": corpus.name,
                        "kind": kind,
                        "case": c,
                        "group": cs.groups[c],
                        "auc": _auc(count.astype(float), gold),
                    }
                )
    return pd.DataFrame(rows)


def exponent_table(corpus: Corpus) -> pd.DataFrame:
    """Each stream's need exponent at its end: the likelihood's best (z = 0) and the store's (``references.Z``)."""
    rows = []
    for g in _streams(corpus):
        n, per = int(corpus.cases.length[g]), _periods(corpus, g)
        E = corpus.embeddings[corpus.text_id[g, :n]]
        user = corpus.cues[g, :n, 0] > 0.5
        need = Need()
        for s, end in enumerate(session_ends(corpus.session[g, :n])):
            now = np.flatnonzero((per == s) & user)
            before = np.flatnonzero(per < s)
            need = need.counted(*count_references(E[now], per[now], E[before], per[before]), end)
        rows.append(
            {
                "dataset": corpus.name,
                "stream": int(g),
                "sessions": int(per[-1]) + 1,
                "references": int(need.refs.sum()),
                "exponent_best": need.exponent(0.0),
                "exponent_used": need.exponent(Z),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class NeedResult:
    """Result of :func:`need_study`.

    Attributes
    ----------
    hazard : DataFrame
        :func:`hazard_table` of each corpus.
    auc : DataFrame
        Per corpus and kind of reference: ``mean`` AUC over questions, ``ci_low, ci_high`` (95%,
        resampling whole groups), ``n_questions``.
    exponents : DataFrame
        :func:`exponent_table` of each corpus.
    info : dict
    """

    hazard: pd.DataFrame
    auc: pd.DataFrame
    exponents: pd.DataFrame
    info: dict = field(default_factory=dict)


def need_study(
    data: DataSpec = EACH, datasets: str = ",".join(DATASETS), seed: int = 0, progress: bool = False
) -> NeedResult:
    """Measure what each corpus's own references say about its users' need (see the module docstring)."""
    data = DataSpec.of(data).reads("need", *READS[1:])  # what load_corpus reads of each corpus
    names = [d.strip() for d in str(datasets).split(",") if d.strip()]
    if not names:
        raise ParameterError(f"datasets must name at least one dataset, got {datasets!r}")
    hazard, auc, exps = [], [], []
    for name in names:
        spec = dataclasses.replace(data, dataset=name)
        corpus = load_corpus(spec, progress)
        hazard.append(hazard_table(corpus))
        per_case = reference_auc(corpus).dropna()
        for kind, part in per_case.groupby("kind", sort=False):
            mean, lo, hi = paired_bootstrap(part["auc"].to_numpy(), seed=seed, groups=part["group"].to_numpy())
            auc.append(
                {"dataset": name, "kind": kind, "mean": mean, "ci_low": lo, "ci_high": hi, "n_questions": len(part)}
            )
        exps.append(exponent_table(corpus))
    info = {"datasets": names, "threshold": THRESHOLD, "rare_share": RARE_SHARE}
    return NeedResult(pd.concat(hazard, ignore_index=True), pd.DataFrame(auc), pd.concat(exps, ignore_index=True), info)


__all__ = [
    "hazard_agreement",
    "DATASETS",
    "NeedResult",
    "exponent_table",
    "hazard_table",
    "need_study",
    "reference_auc",
]
