"""Chapter 02: what the seven factors measure on real conversations.

:func:`goal_relevance_by_gold` is the chapter's table, a pure function of the
blind and oracle :class:`~memlib.cases.CaseSet`; :func:`turn_factors` and
:func:`factor_correlations` give its distributions and correlations;
:func:`factor_overview` loads its data and computes all three.

>>> import numpy as np
>>> from memlib.cases import CaseSet
>>> def one_case(goal):   # three turns, the middle one is gold
...     f = np.zeros((3, 7))
...     f[:, 1] = goal
...     return CaseSet.from_cases([f], [np.arange(3.0)], gold=[[1]])
>>> blind, oracle = one_case([0.9, 0.5, 0.1]), one_case([0.1, 0.9, 0.5])
>>> goal_relevance_by_gold(blind, oracle)[["regime", "gold_percentile"]].to_dict("records")
[{'regime': 'blind', 'gold_percentile': 0.5}, {'regime': 'oracle', 'gold_percentile': 1.0}]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib.cases import CaseSet
from memlib.studies.data_spec import LOCOMO, DataSpec


def turn_factors(ds, ann) -> pd.DataFrame:
    """One row per unique haystack turn of an annotation, with its factors and metadata.

    A turn that appears in several haystacks (several histories) keeps its first occurrence.
    """
    parts = []
    seen = set()
    for g in range(ann.cases.n_haystacks):
        t = ann.turn_table(ds, g)
        t["row"] = ann.turn_rows[g, : ann.cases.length[g]]
        t = t[~t["row"].isin(seen)]
        seen.update(t["row"])
        parts.append(t)
    out = pd.concat(parts, ignore_index=True)
    gold_rows = set()
    cs = ann.cases
    gold_rows.update(ann.turn_rows[cs.case_haystack[cs.gold_case], cs.gold_pos].tolist())
    out["gold_for_any_question"] = out["row"].isin(gold_rows)
    return out


def factor_correlations(table: pd.DataFrame, live) -> pd.DataFrame:
    """Tidy Pearson correlations between the live factor columns (``a``, ``b``, ``r``)."""
    live = [f for f in FACTORS if f in set(live)]
    corr = table[live].corr()
    return corr.rename_axis("a").reset_index().melt(id_vars="a", var_name="b", value_name="r")


def goal_relevance_by_gold(blind: CaseSet, oracle: CaseSet) -> pd.DataFrame:
    """How well goal relevance singles out gold turns in each regime.

    For every case, the percentile rank of each gold turn's goal relevance among
    its haystack (0 = lowest, 1 = highest; ties count half) is averaged. Chance is
    0.5. Returns one row per regime with the mean goal relevance of gold and
    non-gold turns and the mean gold percentile.
    """
    rows = []
    gi = FACTORS.index("goal_relevance")
    for regime, cs in (("blind", blind), ("oracle", oracle)):
        goal = cs.factors[..., gi]
        valid = cs.valid
        h = cs.case_haystack[cs.gold_case]
        g = goal[h, cs.gold_pos]
        below = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] < v) for hh, v in zip(h, g)])
        equal = np.array([np.count_nonzero(goal[hh, : cs.length[hh]] == v) for hh, v in zip(h, g)])
        pct = (below + 0.5 * (equal - 1)) / np.maximum(cs.length[h] - 1, 1)
        per_case = np.bincount(cs.gold_case, weights=pct, minlength=cs.n_cases) / np.maximum(cs.n_gold, 1)
        gold_sum = np.bincount(cs.gold_case, weights=g, minlength=cs.n_cases)
        case_sum = np.where(valid, goal, 0).sum(axis=1)[cs.case_haystack]
        nongold_mean = (case_sum - gold_sum) / (cs.length[cs.case_haystack] - cs.n_gold)
        rows.append(
            {
                "regime": regime,
                "goal_relevance_gold": float(np.mean(g)),
                "goal_relevance_non_gold": float(np.mean(nongold_mean)),
                "gold_percentile": float(np.mean(per_case[cs.n_gold > 0])),
                "cases": int(cs.n_cases),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class FactorOverview:
    """Result of :func:`factor_overview`.

    Attributes
    ----------
    table : DataFrame
        :func:`goal_relevance_by_gold`, one row per regime.
    turns : DataFrame
        :func:`turn_factors` of the blind annotation.
    correlations : DataFrame
        :func:`factor_correlations` of the live factors.
    info : dict
        Dataset counts and the inert factors.
    """

    table: pd.DataFrame
    turns: pd.DataFrame
    correlations: pd.DataFrame
    info: dict = field(default_factory=dict)


def factor_overview(data: DataSpec | str = LOCOMO, progress: bool = False) -> FactorOverview:
    """Annotate ``data`` in both regimes and describe its factors (chapter 02's tables)."""
    ds, anns = DataSpec.of(data).load(progress)
    blind = anns["blind"]
    turns = turn_factors(ds, blind)
    live = [f for f in FACTORS if f not in blind.inert]
    return FactorOverview(
        goal_relevance_by_gold(blind.cases, anns["oracle"].cases),
        turns,
        factor_correlations(turns, live),
        {**ds.stats(), "inert_factors": blind.inert},
    )
