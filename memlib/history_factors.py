"""The factor tables of a dataset's histories, each history that cases share annotated once.

:func:`memlib.factors.annotate` computes the turn-level inputs (embeddings, emotion,
reliability, ...) of every turn the usable cases read, then :func:`history_factors` runs the
online annotator (:func:`memlib.online.annotate_history`) over each distinct history, puts a
non-causal self reading (:mod:`memlib.self_readings`) in place of its self column and an
anchor's goal relevance (:mod:`memlib.goal_anchors`) in place of its goal column, and maps
each case to its history's table and its gold turns to positions in it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlib.online import annotate_history
from memlib.self_readings import self_relevance


def history_factors(sub, E, columns: dict, value_vec, t_days, read: dict, anchor, qvecs, dtype) -> tuple:
    """Return the factors of every history the cases of ``sub`` read: once a history, or a case if the anchor reads it.

    Each history is annotated by :func:`memlib.online.annotate_history` over its turns in
    order (the file's order with ``read["order"] == "file"``, its clock then counting
    sessions); a self reading other than ``earlier`` replaces its self column, an anchor its
    goal column. Returns ``(factors, times, rows, case_table, gold)``: per table its factors,
    times and rows of ``sub.turns``; per case its table and its gold turns' positions in it.
    """
    turns = sub.turns
    roles = turns["role"].to_numpy()
    speakers = turns["speaker"].to_numpy()
    session_codes = pd.factorize(turns["session"])[0]
    first = dict(zip(sub.sessions["session"], sub.sessions["first_turn"]))
    count = dict(zip(sub.sessions["session"], sub.sessions["n_turns"]))
    per_question = anchor is not None and anchor.per_question
    hay_index: dict = {}
    factors, times, rows_list, case_h, gold = [], [], [], [], []
    base: dict = {}  # per unique history: (rows, factors (goal: the annotator's), position of each row, times)
    file_index = sub.cases["session_file_index"] if read["order"] == "file" else [None] * len(sub.cases)
    for c, (hay, gold_rows, in_file) in enumerate(zip(sub.cases["haystack"], sub.cases["gold"], file_index)):
        if in_file is not None:  # the history as its file lists it; its clock counts sessions
            hay = tuple(hay[k] for k in np.argsort(in_file, kind="stable"))
        if hay not in base:
            parts = [np.arange(first[s], first[s] + count[s]) for s in hay]
            rows = np.concatenate(parts)
            clock = np.repeat(np.arange(len(parts), dtype=np.float64), [len(p) for p in parts])
            F = annotate_history(
                E[rows],
                roles[rows],
                speakers[rows],
                session_codes[rows],
                value_profile=value_vec,
                **{name: column[rows] for name, column in columns.items()},
            ).astype(dtype)
            if read["self"] != "earlier":  # a reading that is not the online annotator's (not causal)
                F[:, 3] = self_relevance(E[rows], roles[rows], speakers[rows], read["self"], session_codes[rows])
            base[hay] = (rows, F, {r: i for i, r in enumerate(rows)}, clock if in_file is not None else t_days[rows])
        rows, F0, pos, t_rows = base[hay]
        key_h = (hay, c) if per_question else hay
        if key_h not in hay_index:
            F = F0.copy()
            if anchor is not None:
                F[:, 1] = anchor.goal(sub, c, rows, E, None if qvecs is None else qvecs[c])
            hay_index[key_h] = len(factors)
            factors.append(F)
            times.append(t_rows)
            rows_list.append(rows)
        case_h.append(hay_index[key_h])
        gold.append([pos[g] for g in gold_rows])
    return factors, times, rows_list, case_h, gold


__all__ = ["history_factors"]
