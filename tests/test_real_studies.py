import numpy as np
import pandas as pd
import pytest

import memlib
from fixtures import planted_regimes
from memlib import FACTORS, ParameterError
from memlib.cases import CaseSet
from memlib.learning import fit_mlp
from memlib.metrics import RetentionEvaluator, paired_bootstrap
from memlib.studies import oracle_blind as OB
from memlib.studies._common import evaluate_splits, group_splits
from memlib.studies.mlp import mlp_ablation_on_cases
from memlib.studies.optimisers import optimiser_comparison_on_cases
from memlib.studies.sweep import keep_fraction_sweep_on_cases


def test_paired_bootstrap_recovers_a_planted_gap():
    rng = np.random.default_rng(0)
    gaps = 0.12 + rng.normal(0, 0.2, size=500)
    m, lo, hi = paired_bootstrap(gaps, n_boot=1000, seed=1)
    assert m == pytest.approx(gaps.mean())
    assert lo < 0.12 < hi and lo > 0.05 and hi < 0.2
    # no gap: the interval covers zero
    m0, lo0, hi0 = paired_bootstrap(rng.normal(0, 0.2, size=500), n_boot=1000, seed=1)
    assert lo0 < 0 < hi0
    # clustered resampling is wider when cases within a group move together
    groups = np.repeat(np.arange(10), 50)
    clustered = 0.1 + np.repeat(rng.normal(0, 0.2, size=10), 50) + rng.normal(0, 0.01, 500)
    _, clo, chi = paired_bootstrap(clustered, n_boot=1000, seed=1, groups=groups)
    _, ilo, ihi = paired_bootstrap(clustered, n_boot=1000, seed=1)
    assert chi - clo > 3 * (ihi - ilo)


def xor_cases(n_cases=80, seed=0):
    """Gold iff exactly one of two factors is high: no non-negative linear value separates it.

    Each case has 3 gold items with (high, low) or (low, high) and 17 others with
    (low, low) or (high, high); any positive weighting ranks (high, high) first.
    """
    rng = np.random.default_rng(seed)
    factors, times, gold = [], [], []
    for _ in range(n_cases):
        a = np.r_[rng.random(3) > 0.5, rng.random(17) > 0.5]
        b = np.r_[~a[:3], a[3:]]
        F = np.zeros((20, 7))
        F[:, 0] = np.where(a, 0.8, 0.2) + rng.normal(0, 0.05, 20)
        F[:, 3] = np.where(b, 0.8, 0.2) + rng.normal(0, 0.05, 20)
        F[:, 5] = rng.random(20)  # noise
        perm = rng.permutation(20)
        factors.append(F.clip(0, 1)[perm])
        times.append(np.arange(20.0))
        gold.append(np.flatnonzero(perm < 3))
    return CaseSet.from_cases(factors, times, gold)


@pytest.mark.slow
def test_mlp_learns_an_interaction_a_linear_value_cannot():
    train, test = xor_cases(seed=0), xor_cases(seed=1)
    live = train.live_factors
    score = fit_mlp(train, live, epochs=300, seed=0)
    ev = RetentionEvaluator(test, 0.3)
    r_mlp = ev.mean(score(test.factors))
    from memlib.learning import hill_climb

    lin = hill_climb(RetentionEvaluator(train, 0.3).objective, live, n_iter=200, seed=0)
    r_lin = ev.objective(lin.weights)
    assert r_mlp >= 0.9
    assert r_mlp > r_lin + 0.2


@pytest.mark.slow
def test_mlp_on_linearly_separable_factors_ranks_gold_first():
    rng = np.random.default_rng(3)
    F = [np.c_[rng.random((30, 1)), np.zeros((30, 6))] for _ in range(40)]
    gold = [np.argsort(-f[:, 0])[:3] for f in F]
    cs = CaseSet.from_cases(F, [np.arange(30.0)] * 40, gold)
    score = fit_mlp(cs, cs.live_factors, epochs=200, seed=0)
    assert RetentionEvaluator(cs, 0.1).mean(score(cs.factors)) == 1.0


def test_group_splits_keep_groups_apart_and_validate():
    groups = np.repeat(["a", "b", "c", "d"], 5)
    for tr, te in group_splits(groups, 10, seed=0):
        assert set(groups[tr]).isdisjoint(groups[te])
        assert len(tr) == len(te) == 10
    with pytest.raises(ParameterError, match="too few usable cases to split: 5 cases in 1 group"):
        group_splits(["a"] * 5, 3)
    with pytest.raises(ParameterError, match="n_splits must be an integer >= 2, got 1"):
        group_splits(groups, 1)


def test_evaluate_splits_and_bootstrap_on_planted_data():
    regimes = planted_regimes()
    per_case, weights = evaluate_splits(regimes, keep_fraction=0.3, n_splits=4, seed=0, quick=True)
    summary = per_case.groupby(["policy", "regime"])["retention"].mean()
    assert summary[("goal_only", "oracle")] == 1.0
    assert summary[("learned_V", "blind")] > 0.9
    assert summary[("reliability_only", "blind")] > 0.9
    assert ("recency_only", "oracle") not in summary.index and ("random", "oracle") not in summary.index
    assert summary[("random", "blind")] == pytest.approx(0.3, abs=0.1)
    assert set(weights["factor"][weights["weight"] > 0]) <= {
        "emotional_intensity",
        "goal_relevance",
        "self_relevance",
        "reliability",
    }
    boot = OB.bootstrap_gaps(per_case, n_boot=200)
    row = boot[(boot["comparison"] == "learned_V - recency_only") & (boot["resample"] == "cases")].iloc[0]
    assert row["ci_low"] > 0.3 and row["learned_wins_splits"] == row["n_splits"] == 3  # quick mode: 3 splits


def test_evaluate_splits_rejects_unknown_policy():
    with pytest.raises(ParameterError, match="unknown policy 'oracle_magic'"):
        evaluate_splits(planted_regimes(), policies=("oracle_magic",), n_splits=2)


def test_real_study_parameter_errors():
    with pytest.raises(ParameterError, match=r"keep_fraction must be in \(0, 1\), got 1.5"):
        OB.oracle_vs_blind("locomo", keep_fraction=1.5)
    with pytest.raises(ParameterError, match="n_splits must be an integer >= 2, got 1"):
        OB.oracle_vs_blind("locomo", n_splits=1)
    with pytest.raises(ParameterError, match="unknown dataset 'nope'"):
        OB.oracle_vs_blind("nope")


def test_same_seed_same_numbers():
    a, wa = evaluate_splits(planted_regimes(), n_splits=3, seed=4, quick=True)
    b, wb = evaluate_splits(planted_regimes(), n_splits=3, seed=4, quick=True)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(wa, wb)


def test_table3_layout_and_paper_columns():
    summary = pd.DataFrame(
        {
            "policy": ["learned_V", "learned_V", "recency_only"],
            "regime": ["oracle", "blind", "blind"],
            "mean": [0.9, 0.5, 0.3],
            "std": [0.01, 0.02, 0.03],
        }
    )
    t = OB.table3(summary, "locomo")
    assert list(t["policy"]) == ["learned_V", "recency_only"] and "paper_blind" not in t
    t = OB.table3(summary, "longmemeval_s")
    assert t.set_index("policy").loc["learned_V", "blind_mean"] == 0.5
    assert np.isnan(t.set_index("policy").loc["recency_only", "oracle_mean"])
    assert "paper_blind" in t and "paper_oracle" in t


def test_oracle_vs_blind_summary_carries_the_mean_learned_weights():
    res = OB.oracle_vs_blind_on_cases(planted_regimes(), n_splits=3, quick=True, n_boot=50)
    s = res.summary.set_index(["policy", "regime"])
    for regime in ("blind", "oracle"):
        means = res.weights[res.weights["regime"] == regime].groupby("factor")["weight"].mean()
        for f in FACTORS:
            assert s.loc[("learned_V", regime), f"w_{f}"] == pytest.approx(means[f])
    assert s.drop(index="learned_V", level="policy")[[f"w_{f}" for f in FACTORS]].isna().all().all()
    assert res.info["expected_random"] == pytest.approx(0.3)


def test_learned_weights_from_the_result_the_table_and_the_json(tmp_path):
    from memlib.cli import _table_to_json
    from memlib.store import MemoryStore

    res = OB.oracle_vs_blind_on_cases(planted_regimes(), n_splits=2, quick=True, n_boot=20)
    blind = res.weights[res.weights["regime"] == "blind"].groupby("factor")["weight"].mean()[list(FACTORS)]
    path = tmp_path / "oracle-blind.json"
    path.write_text(_table_to_json(res.summary))  # what `python -m memlib study oracle-blind --json` prints
    for source in (res, res.summary, path, str(path)):
        np.testing.assert_allclose(memlib.learned_weights(source), blind.to_numpy())
    assert memlib.learned_weights(res, regime="oracle")[1] > 0  # the oracle learns goal relevance
    store = MemoryStore(weights=memlib.learned_weights(path))
    np.testing.assert_allclose(store.weights, blind.to_numpy())


def test_learned_weights_say_what_is_missing(tmp_path):
    with pytest.raises(ParameterError, match=r"nope.json: no such file; write it with `python -m memlib study"):
        memlib.learned_weights(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ParameterError, match="bad.json: not a JSON table of the oracle-blind study"):
        memlib.learned_weights(tmp_path / "bad.json")
    old = tmp_path / "old.json"
    old.write_text('[{"policy": "learned_V", "regime": "blind", "mean": 0.5}]')
    with pytest.raises(
        ParameterError,
        match="old.json: the learned_V row of regime 'blind' has no w_emotional_intensity, w_goal_relevance",
    ):
        memlib.learned_weights(old)
    with pytest.raises(ParameterError, match="old.json has no learned_V row for regime 'oracle'"):
        memlib.learned_weights(old, regime="oracle")
    with pytest.raises(ParameterError, match="expected the rows of the oracle-blind study's table, got int"):
        memlib.learned_weights(3)


@pytest.mark.slow
def test_mlp_ablation_on_planted_cases():
    res = mlp_ablation_on_cases(planted_regimes()["blind"], n_splits=3, quick=True)
    per = res.per_split.pivot(index="split", columns="policy", values="retention")
    # gold is planted in reliability alone: both models find it
    assert (per["learned_V"] > 0.9).all() and (per["mlp"] > 0.9).all()
    np.testing.assert_allclose(per["mlp_minus_linear"], per["mlp"] - per["learned_V"])
    s = res.summary.set_index("policy")
    assert list(s.index) == ["learned_V", "mlp", "mlp_minus_linear"]
    assert s.loc["mlp_minus_linear", "win_share"] == pytest.approx((per["mlp_minus_linear"] > 0).mean())
    assert np.isnan(s.loc["mlp", "win_share"]) and (s["n_splits"] == 3).all()


def test_keep_fraction_sweep_on_planted_cases():
    res = keep_fraction_sweep_on_cases(planted_regimes()["blind"], fractions=(0.1, 0.3), n_splits=2, quick=True)
    s = res.summary.set_index(["policy", "keep_fraction"])
    assert len(s) == 5 * 2 and set(res.per_split["split"]) == {0, 1}
    # 3 gold turns of 30, all with the top reliability: keeping 10% already keeps them all
    for kappa in (0.1, 0.3):
        assert s.loc[("learned_V", kappa), "mean"] == 1.0
        assert s.loc[("best_single_factor", kappa), "factor"] == "reliability_only"
        assert s.loc[("recency_only", kappa), "mean"] < 0.7
    assert (s.xs("learned_V", level="policy")["factor"] == "").all()
    with pytest.raises(ParameterError, match="fractions must hold at least one keep fraction"):
        keep_fraction_sweep_on_cases(planted_regimes()["blind"], fractions=())


def test_optimiser_comparison_on_planted_cases():
    res = optimiser_comparison_on_cases(planted_regimes()["blind"], n_splits=2, quick=True)
    s = res.summary.set_index("optimiser")
    assert res.info["budget"] == 101  # quick: 100 iterations x 1 restart, plus the start
    evaluations = res.per_split.groupby("optimiser")["evaluations"].max()
    # the hill-climb stays within the budget; CMA-ES checks it once per generation (8 samples in 4 dimensions)
    assert evaluations["hill_climb"] <= res.info["budget"]
    assert abs(evaluations["cma_es"] - res.info["budget"]) <= 8
    assert s.loc["hill_climb", "mean"] > 0.9 and s.loc["cma_es", "mean"] > 0.9
    wide = res.per_split.pivot(index="split", columns="optimiser", values="retention")
    assert s.loc["cma_minus_hill_climb", "mean"] == pytest.approx((wide["cma_es"] - wide["hill_climb"]).mean())
    # both weight vectors lean on reliability, so they point the same way
    assert s.loc["cma_minus_hill_climb", "weight_cosine"] > 0.5
    assert set(res.weights.loc[res.weights["weight"] > 0, "factor"]) <= {
        "emotional_intensity",
        "goal_relevance",
        "self_relevance",
        "reliability",
    }


def test_the_mlp_difference_interval_reads_its_verdict_from_the_splits():
    from memlib.studies.mlp import VERDICTS, difference_interval

    def per_split(diffs, regime="blind"):
        d = pd.DataFrame({"policy": "mlp_minus_linear", "regime": regime, "retention": diffs})
        return pd.concat([d, d.assign(policy="mlp")], ignore_index=True)  # other rows are not read

    tie = difference_interval(per_split([0.1, -0.1, 0.05, -0.05])).iloc[0]
    assert tie["verdict"] == "tie" and tie["ci_low"] < 0 < tie["ci_high"] and tie["n_splits"] == 4
    behind = difference_interval(per_split([-0.2, -0.25, -0.3])).set_index("regime").loc["blind"]
    half = 1.96 * np.std([-0.2, -0.25, -0.3], ddof=1) / np.sqrt(3)
    assert behind["verdict"] == "linear_ahead" and behind["ci_high"] == pytest.approx(-0.25 + half)
    both = difference_interval(pd.concat([per_split([0.2, 0.3, 0.25]), per_split([0.0, 0.1], "oracle")]))
    assert both.set_index("regime")["verdict"].to_dict() == {"blind": "mlp_ahead", "oracle": "tie"}
    assert set(VERDICTS) >= set(both["verdict"])


# --------------------------------------------------------------------------- the data of a study


def test_a_data_spec_resolves_quick_mode_once():
    from memlib.studies import QUICK_LIMIT, DataSpec

    assert DataSpec("locomo", quick=True, sample=8).resolved() == DataSpec("locomo", quick=True, limit=QUICK_LIMIT)
    assert DataSpec("locomo", quick=True, limit=2).resolved().limit == 2  # a limit is kept
    full = DataSpec("locomo", sample=8)
    assert full.resolved() is full and full.info() == {"sample": 8, "factor_set": "paper", "embedding": "fast"}
    assert DataSpec("locomo", quick=True, sample=8).info()["sample"] is None  # what ran, not what was asked
    assert DataSpec.of("locomo") == DataSpec("locomo")
    assert DataSpec.of("longmemeval_s", like=OB.DATA) == DataSpec("longmemeval_s", factor_set="both")
    assert DataSpec("locomo", factor_set="all").factor_sets == ("paper", "extended", "released")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"dataset": "nope"}, "unknown dataset 'nope'"),
        ({"dataset": 3}, "dataset must be a dataset name or a path, got 3"),
        ({"limit": 0}, "limit must be an integer >= 1, got 0"),
        ({"sample": -2}, "sample must be an integer >= 1, got -2"),
        ({"sample": 2.5}, "sample must be an integer >= 1, got 2.5"),
        ({"histories": 0}, "histories must be an integer >= 1, got 0"),
        ({"limit": 2, "sample": 3}, "pass limit or sample, not both (limit=2, sample=3)"),
        ({"quick": "yes"}, "quick must be True or False, got 'yes'"),
        ({"factor_set": "table1"}, "unknown factor_set 'table1'"),
        ({"embedding_setting": "huge"}, "unknown embedding_setting 'huge'"),
        ({"readings": {"colour": "blue"}}, "unknown reading 'colour'"),
        ({"readings": "order=time"}, "readings must be a dict of reading names, got 'order=time'"),
    ],
)
def test_a_data_spec_refuses_bad_fields_in_one_line(fields, message):
    from memlib.studies import DataSpec

    with pytest.raises(ParameterError) as err:
        DataSpec(**{"dataset": "locomo", **fields})
    assert message in str(err.value)


def test_a_study_refuses_data_it_does_not_read():
    from memlib.studies import STUDIES, DataSpec

    with pytest.raises(ParameterError, match="the cues study reads no factor_set .*, got 'extended'"):
        STUDIES["cues"].run.uncached(DataSpec("locomo", factor_set="extended"))
    with pytest.raises(ParameterError, match="the transfer study reads no dataset"):
        STUDIES["transfer"].run.uncached(DataSpec("locomo"))
    with pytest.raises(ParameterError, match="the released study reads the released factor set at the reference"):
        STUDIES["released"].run.uncached(STUDIES["released"].data_spec(embedding_setting="int8"))
    with pytest.raises(ParameterError, match="the stream study reads no readings"):
        STUDIES["stream"].run.uncached(DataSpec("locomo", readings={"order": "time"}))
    with pytest.raises(ParameterError, match="the paper study reads no histories .*, got 2"):
        STUDIES["paper"].run.uncached(DataSpec("longmemeval_s", histories=2))
    with pytest.raises(ParameterError, match="factor_set 'both' names several sets; load one at a time"):
        DataSpec("locomo", factor_set="both").load()
    with pytest.raises(ParameterError, match="the synthetic study reads no data"):
        STUDIES["synthetic"].data_spec(quick=True)


def test_every_real_data_study_reads_one_data_spec_and_shows_it():
    """The command line and the chapters build a study's data the same way, from its default."""
    from memlib.studies import STUDIES, DataSpec

    for name, study in STUDIES.items():
        if name == "synthetic":
            assert "data" not in study.parameters and "quick" in study.parameters
            continue
        assert study.parameters[0] == "data", name
        assert not {"dataset", "quick", "limit", "sample", "factor_set", "embedding"} & set(study.parameters), name
        assert isinstance(study.data_spec(), DataSpec)
    assert STUDIES["oracle-blind"].data_spec(dataset="longmemeval_s").factor_set == "both"
    assert STUDIES["paper"].data_spec().dataset == "longmemeval_s"
    assert STUDIES["transfer"].data_spec(quick=True).dataset is None
