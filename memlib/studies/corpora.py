"""A corpus replayed through the store: what a store holds of each turn, and what it keeps and returns.

The defaults study (chapter 06) replays whole corpora, thousands of histories, under many
values and policies. :class:`Corpus` holds one corpus as the store would hold it (the blind
factors, the store cues, sessions, embeddings and valences of every turn, and the questions),
from one annotation. :meth:`Corpus.view` shows one history to the store as a
:class:`~memlib.store.StoreView`; :func:`kept` replays every history through a policy with the
store's own replay (:func:`memlib.store.held_after`), and :func:`recall_per_case` ranks each
question over what was kept with the store's retrieval rule (:func:`memlib.store.rank`). No
forgetting or retrieval rule is written here: the store's are called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memlib._checks import ParameterError, check_int
from memlib.answers import answer_turns
from memlib.cases import CaseSet
from memlib.cues import STORE_CUES
from memlib.metrics import keep_count
from memlib.references import ReferenceTable, reference_table
from memlib.store import StoreView, held_after, rank, session_ends
from memlib.studies import _cache
from memlib.studies.data_spec import DataSpec

#: Quick mode keeps at most this many questions of each corpus (of its first groups; RealMem's users ask ~140 each).
QUICK_CASES = 40
#: What :func:`load_corpus` reads of a :class:`~memlib.studies.data_spec.DataSpec`.
READS = ("dataset", "quick", "limit", "sample", "histories", "embedding_setting")


@dataclass
class Corpus:
    """One corpus as a store would hold it: the blind cases and, per history, what the store reads of each turn.

    Attributes
    ----------
    name : str
    cases : CaseSet
        The blind annotation (the paper's factors) of every history, and the questions' gold.
    cues : ndarray, shape (G, N, 12)
        The store cues of :data:`memlib.cues.STORE_CUES` of each turn.
    session : ndarray, shape (G, N)
        Session codes (a session is a run of equal codes).
    text_id : ndarray, shape (G, N)
        Rows of ``embeddings``, ``valence`` and ``texts`` (of the texts the histories hold, in the order of
        the dataset's text ids).
    embeddings : ndarray, shape (texts, 384)
        Unit embeddings of the texts.
    valence : ndarray, shape (texts,)
        VADER valence of each text.
    questions : ndarray, shape (C, 384)
        Embedding of each question.
    question_valence : ndarray, shape (C,)
    texts : list of str, optional
        The texts (rows of ``text_id``).
    answers : list of str, optional
        Each question's answer string where the corpus gives one (``""`` where not): what
        :func:`answer_retention_per_case` looks for.
    """

    name: str
    cases: CaseSet
    cues: np.ndarray
    session: np.ndarray
    text_id: np.ndarray
    embeddings: np.ndarray
    valence: np.ndarray
    questions: np.ndarray
    question_valence: np.ndarray
    texts: list | None = None
    answers: list | None = None

    def subset(self, cases_idx) -> Corpus:
        """Return the corpus of the cases ``cases_idx`` and their histories."""
        cases_idx = np.asarray(cases_idx, dtype=np.int64)
        used = np.unique(self.cases.case_haystack[cases_idx])
        cs = self.cases.subset(cases_idx)
        N = int(cs.length.max()) if len(cs.length) else 0
        return Corpus(
            self.name,
            cs,
            self.cues[used, :N],
            self.session[used, :N],
            self.text_id[used, :N],
            self.embeddings,
            self.valence,
            self.questions[cases_idx],
            self.question_valence[cases_idx],
            self.texts,
            None if self.answers is None else [self.answers[c] for c in cases_idx],
        )

    def answer_turns(self) -> list:
        """Per question, the positions in its history of the turns that hold its answer string, or None.

        :func:`memlib.answers.answer_turns` on each question's history; computed once.
        """
        if "_answer_turns" not in self.__dict__:
            cs, found = self.cases, []
            for c in range(cs.n_cases):
                answer = None if self.answers is None or self.texts is None else self.answers[c]
                g = int(cs.case_haystack[c])
                ids = self.text_id[g, : int(cs.length[g])] if answer else []  # no answer: no history to read
                found.append(answer_turns([self.texts[i] for i in ids], answer))
            self.__dict__["_answer_turns"] = found
        return self.__dict__["_answer_turns"]

    def references(self, g: int) -> ReferenceTable:
        """Return the reference events of history ``g`` (:func:`memlib.references.reference_table`), counted once.

        Histories nested in one another (RealMem's: each question's history is a prefix of its
        user's later ones) share the table of the longest, which is counted once for all of them;
        a replay of any policy or budget reads it (:func:`memlib.store.held_after`).
        """
        cache = self.__dict__.setdefault("_references", {})
        if g not in cache:
            n = int(self.cases.length[g])
            longest = self._longest_with_prefix(g)
            if longest not in cache:
                m = int(self.cases.length[longest])
                ends = session_ends(self.session[longest, :m])
                user = self.cues[longest, :m, STORE_CUES.index("is_user")] > 0.5
                cache[longest] = reference_table(self.embeddings[self.text_id[longest, :m]], ends, user)
            ends = session_ends(self.session[g, :n])
            cache[g] = cache[longest].prefix(len(ends), n)
        return cache[g]

    def _longest_with_prefix(self, g: int) -> int:
        """Return the longest history that begins with history ``g``'s turns and sessions (``g`` if none).

        Its session must end where ``g`` ends, so that the sessions ``g`` holds are whole in both.
        """
        lengths, n = self.cases.length, int(self.cases.length[g])
        if n == 0:
            return g
        for h in np.argsort(-lengths, kind="stable"):
            if lengths[h] <= n:
                break
            if (
                self.session[h, n] != self.session[h, n - 1]
                and np.array_equal(self.text_id[h, :n], self.text_id[g, :n])
                and np.array_equal(self.session[h, :n], self.session[g, :n])
            ):
                return int(h)
        return g

    def shuffled_references(self, seed: int = 0) -> Corpus:
        """Return a placebo of the corpus: in each history, the user turns' texts shuffled among its user turns.

        What a turn says, and so whom it seems to refer back to, is moved to another time of the
        same stream; every cue, factor and value stays where it was. A store that adapts to its
        user's references must gain nothing here (:mod:`memlib.studies.defaults`).
        """
        rng = np.random.default_rng(seed)
        text_id = self.text_id.copy()
        user = self.cues[..., STORE_CUES.index("is_user")] > 0.5
        for g in range(len(text_id)):
            pos = np.flatnonzero(user[g, : int(self.cases.length[g])])
            text_id[g, pos] = text_id[g, rng.permutation(pos)]
        return dataclasses.replace(self, text_id=text_id)

    def without_cue(self, name: str) -> Corpus:
        """Return the corpus with the store cue ``name`` set to 0 on every turn (what a value learned without it reads).

        A cue that is 0 everywhere gets no weight from :func:`memlib.learning.fit_cue_value` (its ridge
        penalty), so a value learned on such corpora is the value learned without the cue.
        """
        if name not in STORE_CUES:
            raise ParameterError(f"unknown store cue {name!r}; choose one of {', '.join(STORE_CUES)}")
        cues = self.cues.copy()
        cues[..., STORE_CUES.index(name)] = 0.0
        return dataclasses.replace(self, cues=cues)

    def view(self, g: int, value) -> StoreView:
        """Return the store's view of history ``g`` with every turn held, scored by ``value``."""
        n = int(self.cases.length[g])
        ids = self.text_id[g, :n]
        return StoreView.of_history(
            value,
            time=self.cases.time[g, :n],
            embeddings=self.embeddings[ids],
            factors=self.cases.factors[g, :n].astype(np.float64),
            cues=self.cues[g, :n],
            valence=self.valence[ids],
        )


def load_corpus(data: DataSpec | str, progress: bool = False) -> Corpus:
    """Load the blind (paper) annotation of ``data``, its store cues, sessions, embeddings and valences.

    Loaded once per data and code: every study that reads the same corpus the same way (the
    defaults and need studies, ``python -m memlib defaults``) reads the first one's, from the
    result cache (:mod:`._cache`, keyed as a study's result is, by the data files' content and
    memlib's source).
    """
    data = DataSpec.of(data).reads("defaults", *READS)
    if data.sample is not None:
        check_int("sample", data.sample, minimum=2)  # a smaller dataset is used whole
    return _load_once(data, progress)


def _load(data: DataSpec, progress: bool = False) -> Corpus:
    """:func:`load_corpus`, computed."""
    from memlib.cues import compute_cues
    from memlib.embeddings import embed_cached, embed_text_table
    from memlib.factors import emotion_features, text_valence

    ds, anns = data.load(progress, regimes=("blind",))
    ann = anns["blind"]
    embedding = data.embedding_setting
    raw = compute_cues(ds, ann, embedding_setting=embedding, progress=progress).select(STORE_CUES)
    rows = ann.turn_rows
    valid = rows >= 0
    rr = np.where(valid, rows, 0)
    sess_code = pd.factorize(ds.turns["session"])[0]
    text_ids = ds.turns["text_id"].to_numpy()
    # only the texts the histories hold, renumbered in text-id order: a sample of a corpus carries (and its cache
    # entry writes) the texts it reads, not every text of the file
    used = np.unique(text_ids[rr[valid]])
    texts = [ds.texts[i] for i in used]
    E = embed_text_table(texts, np.arange(len(texts)), embedding, progress=progress)
    usable = ds.usable()
    qs = usable.cases["question"].tolist()
    corpus = Corpus(
        ds.name,
        ann.cases,
        raw.values.astype(np.float64),
        np.where(valid, sess_code[rr], -1),
        np.where(valid, np.searchsorted(used, text_ids[rr]), 0),
        E,
        text_valence(ds.texts, used),  # the annotation's VADER pass where it just ran (a cold run): not a second one
        np.asarray(embed_cached(qs, embedding, progress=progress), np.float32),
        emotion_features(qs)[:, 0],
        texts,
        usable.cases["answer"].tolist(),
    )
    if data.quick and corpus.cases.n_cases > QUICK_CASES:  # evenly spread, so a stream's later questions stay in
        corpus = corpus.subset(np.unique(np.linspace(0, corpus.cases.n_cases - 1, QUICK_CASES).astype(np.int64)))
    return corpus


_cache.register(Corpus, CaseSet)
_load_once = _cache.cached("corpus", _load)


def kept(corpus: Corpus, value, policy, keep_fraction: float) -> np.ndarray:
    """Which turns of each history a store keeps: ``(G, N)`` masks, every history replayed through ``policy``.

    Each history is replayed as an agent's store replays it (:func:`memlib.store.held_after`: the
    turns arrive in order, the store consolidates to its budget, ``keep_fraction`` of the
    history's turns, at every session end), with its turns scored by ``value``.
    """
    G, N = corpus.session.shape
    out = np.zeros((G, N), bool)
    for g in range(G):
        n = int(corpus.cases.length[g])
        budget = int(keep_count([n], keep_fraction)[0])
        refs = corpus.references(g) if policy.reads_need else None
        held = held_after(corpus.view(g, value), policy, corpus.session[g, :n], [(n, budget)], refs).held[0]
        out[g, held] = True
    return out


def retention_per_case(cases: CaseSet, kept_masks: np.ndarray) -> np.ndarray:
    """Share of each case's gold turns in ``kept_masks`` (the masks of its history)."""
    hit = kept_masks[cases.case_haystack[cases.gold_case], cases.gold_pos].astype(float)
    return np.bincount(cases.gold_case, hit, cases.n_cases) / np.maximum(cases.n_gold, 1)


def recall_per_case(
    corpus: Corpus, value, kept_masks: np.ndarray, policies, k: int, ranking=rank
) -> tuple[np.ndarray, np.ndarray]:
    """``recall_any@k`` and ``recall_all@k`` of each case under each retrieval policy, over its history's kept turns.

    Each question is ranked as the store ranks it (:func:`memlib.store.rank`, or ``ranking``, a
    function of ``rank``'s arguments, for a measurement of another order) over the turns its
    history kept, scored by ``value``; a forgotten gold turn counts as missed. Returns two arrays
    of shape ``(len(policies), cases)``.
    """
    cs = corpus.cases
    any_, all_ = np.zeros((len(policies), cs.n_cases)), np.zeros((len(policies), cs.n_cases))
    gold_of = pd.Series(cs.gold_pos).groupby(cs.gold_case).apply(np.asarray)
    for g in np.unique(cs.case_haystack):
        held = np.flatnonzero(kept_masks[g])
        if not len(held):
            continue
        view = corpus.view(g, value).take(held)
        for c in np.flatnonzero(cs.case_haystack == g):
            gold = gold_of.get(c, np.zeros(0, np.int64))
            if not len(gold):
                continue
            for p, policy in enumerate(policies):
                top = held[ranking(view, policy, corpus.questions[c], corpus.question_valence[c], k=k)]
                hits = np.isin(gold, top)
                any_[p, c], all_[p, c] = hits.any(), hits.all()
    return any_, all_


def answer_retention_per_case(corpus: Corpus, kept_masks: np.ndarray) -> np.ndarray:
    """Whether each question's answer string is still in a turn its history kept (NaN where it cannot say).

    A second measure of forgetting that reads no evidence labels: for a question whose corpus
    gives an answer string found as whole words in one to
    :data:`memlib.answers.ANSWER_MAX_TURNS` turns of its history
    (:func:`memlib.answers.answer_turns`), 1.0 if one of those turns was kept, else 0.0; NaN for
    every other question (no answer, a paraphrased one, or one as common as "2").
    """
    out = np.full(corpus.cases.n_cases, np.nan)
    for c, turns in enumerate(corpus.answer_turns()):
        if turns is not None:
            out[c] = float(kept_masks[corpus.cases.case_haystack[c], turns].any())
    return out


__all__ = ["Corpus", "answer_retention_per_case", "kept", "load_corpus", "recall_per_case", "retention_per_case"]
