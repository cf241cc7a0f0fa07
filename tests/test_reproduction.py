"""Chapter 08's machinery on planted data and on the LongMemEval fixture."""

import numpy as np
import pandas as pd
import pytest

from fixtures import longmemeval_records, write_longmemeval
from memlib import datasets as D
from memlib.cases import CaseSet
from memlib.studies import STUDIES
from memlib.studies import reproduction as R


def test_tie_rules_differ_only_on_ties():
    # one haystack: reliability ties at 1 for turns 0-2 (gold is turn 1), then 0 for turns 3-5
    F = np.zeros((6, 7))
    F[:3, 5] = 1.0
    cs = CaseSet.from_cases([F], [np.arange(6.0)], gold=[[1]])
    t = R.tie_readings(cs, "reliability_only", keep_fraction=2 / 6).set_index("ties")["retention"]
    assert t["never favour gold"] == 0.0  # two slots, two non-gold tied turns take them
    assert t["random"] == pytest.approx(2 / 3)  # two of three tied turns kept, uniformly
    assert t["newest first"] == 1.0  # turns 2 and 1 are kept
    assert t["oldest first"] == 1.0  # turns 0 and 1 are kept
    t = R.tie_readings(cs, "reliability_only", keep_fraction=1 / 6).set_index("ties")["retention"]
    assert (t["newest first"], t["oldest first"]) == (0.0, 0.0)  # turn 2, resp. turn 0
    # no ties: every rule agrees
    F2 = np.zeros((6, 7))
    F2[:, 5] = np.linspace(0, 1, 6)
    cs2 = CaseSet.from_cases([F2], [np.arange(6.0)], gold=[[4]])
    assert R.tie_readings(cs2, "reliability_only", keep_fraction=0.5)["retention"].tolist() == [1.0] * 4


def test_explain_gaps_is_computed_from_the_measurements():
    comparison = pd.DataFrame(
        {
            "policy": ["self_only", "emotion_only", "goal_only", "learned_V"],
            "regime": ["blind"] * 4,
            "ours": [0.40, 0.06, 0.29, 0.55],
            "paper": [0.518, 0.201, 0.286, 0.770],
        }
    )
    readings = pd.DataFrame(
        {
            "policy": ["self_only", "self_only", "emotion_only"],
            "reading": ["a", "b", "c"],
            "retention": [0.40, 0.52, 0.07],
        }
    )
    out = R.explain_gaps(comparison, readings).set_index("policy")
    assert out.loc["goal_only", "explanation"] == "within 0.03"
    assert "the reading 'b' gives 0.520" in out.loc["self_only", "explanation"]
    assert "no reading we tried reaches it (1 readings, 0.070 to 0.070)" in out.loc["emotion_only", "explanation"]
    assert out.loc["learned_V", "explanation"].startswith("not explained by the 2 missing questions")
    np.testing.assert_allclose(out["gap"], comparison["ours"] - comparison["paper"])
    # variants explain learned and uniform gaps, in their own regime only
    variants = pd.DataFrame(
        {
            "variant": ["as read", "scaled", "scaled"],
            "regime": ["blind", "blind", "oracle"],
            "policy": ["learned_V", "learned_V", "learned_V"],
            "mean": [0.55, 0.60, 0.77],
        }
    )
    out = R.explain_gaps(comparison, readings, variants=variants).set_index("policy")
    assert "no reading we tried reaches it (2 readings, 0.550 to 0.600)" in out.loc["learned_V", "explanation"]
    close = comparison.assign(ours=[0.40, 0.06, 0.29, 0.60])
    variants.loc[1, "mean"] = 0.75
    out = R.explain_gaps(close, readings, variants=variants).set_index("policy")
    assert "the reading 'scaled' gives 0.750" in out.loc["learned_V", "explanation"]
    # the paper's figure inside the readings' range is not enough: one reading must come close
    variants.loc[1, "mean"] = 0.95
    out = R.explain_gaps(close, readings, variants=variants).set_index("policy")
    assert "no reading we tried reaches it (2 readings, 0.550 to 0.950)" in out.loc["learned_V", "explanation"]
    # rows of the extended factor set are not explained by the paper set's readings
    ext = close.assign(factor_set="extended")
    out = R.explain_gaps(ext, readings, variants=variants).set_index("policy")
    assert "reading" not in out.loc["learned_V", "explanation"]


def test_scalings_keep_padding_and_order_within_a_factor():
    rng = np.random.default_rng(0)
    cs = CaseSet.from_cases([rng.random((5, 7)), rng.random((3, 7))], [np.arange(5.0), np.arange(3.0)], gold=[[0], [1]])
    mm = R.minmax_within_history(cs)
    assert mm.factors.shape == cs.factors.shape and np.all(mm.factors[1, 3:] == 0)  # padding stays 0
    for g, n in enumerate(cs.length):
        real = mm.factors[g, :n]
        np.testing.assert_allclose(real.min(axis=0), 0, atol=1e-6)
        np.testing.assert_allclose(real.max(axis=0), 1, atol=1e-6)
        # a monotone map: each factor's order within a history is unchanged
        assert (np.argsort(real, axis=0, kind="stable") == np.argsort(cs.factors[g, :n], axis=0, kind="stable")).all()
    rc = R.raw_cosines(cs)
    goal, emo = R.FACTORS.index("goal_relevance"), R.FACTORS.index("emotional_intensity")
    np.testing.assert_allclose(rc.factors[0, :, goal], 2 * cs.factors[0, :, goal] - 1, rtol=1e-6)
    np.testing.assert_array_equal(rc.factors[..., emo], cs.factors[..., emo])
    assert np.all(rc.factors[1, 3:] == 0)


def test_paper_figures_reach_only_the_paper_column():
    summary = pd.DataFrame(
        {
            "factor_set": ["paper"] * 2,
            "regime": ["blind", "oracle"],
            "policy": ["learned_V", "recency_only"],
            "mean": [0.1, 0.2],
            "std": [0.0, 0.0],
        }
    )
    ours = R.paper_comparison(summary, "longmemeval_s")
    assert ours["mean"].tolist() == [0.1, 0.2] and ours["paper_mean"].iloc[0] == 0.770
    assert np.isnan(ours["paper_mean"].iloc[1])  # the paper has no oracle recency row
    assert R.paper_comparison(summary, "locomo")["paper_mean"].isna().all()


def test_session_overlap_and_components(tmp_path):
    recs = longmemeval_records()
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json", recs)))
    ov = R.session_overlap(ds, n_splits=4, seed=0)
    assert ov["questions"] == 2 and ov["components"] == 1  # the fixture's questions share filler_a
    assert 0 < ov["test_sessions_seen_in_training"] < 1
    assert R._components([{1}, {2}, {1, 3}, {4}]) == 3
    assert R._components([]) == 0


@pytest.mark.slow
def test_reading_and_variant_tables_on_the_fixture(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    ds = D.load(str(write_longmemeval(tmp_path / "lme.json"))).usable()
    rt = R.reading_table(ds, keep_fraction=0.5)
    assert set(rt["policy"]) == {"emotion_only", "self_only", "reliability_only", "goal_only", "recency_only", "random"}
    assert rt.groupby("policy")["default"].sum().eq(1).all()  # one default reading per policy
    assert rt["retention"].between(0, 1).all() and "paper_blind" not in rt  # not the paper's dataset
    vt = R.variant_table(ds, keep_fraction=0.5, n_splits=2, quick=True)
    assert len(vt) == 2 * (len(R.VARIANTS) + 1 + 2 * len(R.SCALINGS))
    assert set(vt["policy"]) == {"learned_V", "uniform_V"}
    assert set(vt.query("regime == 'oracle'")["variant"]) == {R.VARIANTS[0][0], *(label for label, _ in R.SCALINGS)}


@pytest.mark.slow
def test_the_reproduction_result_is_cached_whole(tmp_path, monkeypatch):
    from memlib.studies import _cache

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path = write_longmemeval(tmp_path / "lme.json")
    r = R.reproduce(STUDIES["paper"].data_spec(dataset=str(path), quick=True), keep_fraction=0.5, n_splits=2)
    _cache.save(tmp_path / "r.npz", r)  # raises Uncacheable when a part does not read back equal
    back = _cache.load(tmp_path / "r.npz")
    assert _cache.same(r, back)
    pd.testing.assert_frame_equal(back.table, r.table)
    pd.testing.assert_frame_equal(back.variants, r.variants)
    assert back.overlap == r.overlap and back.info["dataset"] == r.info["dataset"]
