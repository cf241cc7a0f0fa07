"""Figures reported in the paper, kept only as labelled reference values.

Nothing in the library computes with these numbers; notebooks show them in a
column headed "paper" beside our own measurements so a reader can compare.
Source: "Learning What to Remember: A Cognitively Grounded Multi-Factor Value
Model for Agentic Memory" (the copy in ``../shared/paper``).
"""

#: Table 2 of the paper: synthetic confound study, gold retention at keep 40%.
PAPER_TABLE2 = {
    "learned_V": 1.00,
    "uniform_V": 0.62,
    "emotion_only": 0.00,
    "self_only": 0.00,
    "recency_only": 0.00,
}

#: Section 4.1 of the paper: learned synthetic weights it reports.
PAPER_TABLE2_WEIGHTS = {
    "reliability": 1.36,
    "task_utility": 0.88,
    "goal_relevance": 0.49,
    "value_alignment": 0.09,
    "self_relevance": 1.01,
}

# ---- REFERENCE ONLY: the paper's reported figures, shown in columns named paper_* ----
#: Table 3 of the paper (LongMemEval-S, keep 30%, 20 splits): policy -> {regime: (mean, std)}.
#: Recency and random have no oracle variant; random's std is not reported.
PAPER_TABLE3 = {
    "learned_V": {"oracle": (0.993, 0.005), "blind": (0.770, 0.011)},
    "uniform_V": {"oracle": (0.939, 0.011), "blind": (0.657, 0.011)},
    "self_only": {"oracle": (0.518, 0.017), "blind": (0.518, 0.017)},
    "reliability_only": {"oracle": (0.497, 0.020), "blind": (0.497, 0.020)},
    "goal_only": {"oracle": (0.979, 0.006), "blind": (0.286, 0.021)},
    "emotion_only": {"oracle": (0.201, 0.017), "blind": (0.201, 0.017)},
    "recency_only": {"blind": (0.368, 0.021)},
    "random": {"blind": (0.300, None)},
}

#: Section 4.2 of the paper: mean learned blind weights on LongMemEval-S.
PAPER_BLIND_WEIGHTS = {
    "reliability": 0.64,
    "emotional_intensity": 0.55,
    "self_relevance": 0.23,
    "goal_relevance": 0.00,
}

#: Section 4.2 of the paper: per-case bootstrap of learned_V minus a baseline (mean gap, 95% CI).
PAPER_BOOTSTRAP = {
    "learned_V - uniform_V": (0.120, 0.091, 0.149),
    "learned_V - recency_only": (0.402, 0.350, 0.452),
    "learned_V - reliability_only": (0.277, 0.235, 0.319),
}

# ---- REFERENCE ONLY: the paper's reported figures, shown in columns named paper_* ----
#: Section 4.2 of the paper: MLP ablation (blind, LongMemEval-S).
PAPER_MLP = {"mlp": (0.773, 0.011), "learned_V": (0.770, 0.011), "mlp_minus_linear": (0.003, 0.013), "win_share": 0.55}

#: The dataset name under which the paper's real-data figures apply.
PAPER_DATASET = "longmemeval_s"


def table3_means() -> dict:
    """Table 3's means keyed by ``(policy, regime)``, for a ``paper_mean`` column.

    >>> table3_means()[("learned_V", "blind")]
    0.77
    """
    return {(p, r): m for p, row in PAPER_TABLE3.items() for r, (m, _) in row.items()}


def mlp_means() -> dict:
    """Return the MLP ablation's means keyed by policy, for a ``paper_mean`` column."""
    return {p: v[0] for p, v in PAPER_MLP.items() if isinstance(v, tuple)}


# ---- REFERENCE ONLY: the authors' own result files, shown in columns named authors_* ----
#: Where the values below were read: the authors' released repository and its result files.
AUTHORS_SOURCE = (
    "zhibao-dev/Learning-Multi-Factor-Memory: results/lme_blind_forgetting_full.json, "
    "results/lme_keepfrac_sweep.json, results/lme_value_net_ablation.json (479 cases, 20 splits)"
)

#: ``results/lme_blind_forgetting_full.json``: Table 3 as the authors' run wrote it, ``(policy, regime) -> (mean,
#: population std)`` over the 20 splits. Recency has no oracle row; the random policy is written as 0.3.
AUTHORS_TABLE3 = {
    ("learned_V", "oracle"): (0.9926, 0.0047),
    ("uniform_V", "oracle"): (0.9390, 0.0109),
    ("goal_only", "oracle"): (0.9788, 0.0056),
    ("self_only", "oracle"): (0.5176, 0.0172),
    ("emotion_only", "oracle"): (0.2011, 0.0165),
    ("reliability_only", "oracle"): (0.4974, 0.0201),
    ("learned_V", "blind"): (0.7698, 0.0114),
    ("uniform_V", "blind"): (0.6575, 0.0108),
    ("goal_only", "blind"): (0.2860, 0.0214),
    ("self_only", "blind"): (0.5176, 0.0172),
    ("emotion_only", "blind"): (0.2011, 0.0165),
    ("reliability_only", "blind"): (0.4974, 0.0201),
    ("recency_only", "blind"): (0.3676, 0.0207),
}

#: The same file's mean blind weights, by memlib factor name.
AUTHORS_BLIND_WEIGHTS = {
    "emotional_intensity": 0.5543,
    "goal_relevance": 0.0,
    "self_relevance": 0.2289,
    "reliability": 0.6391,
}

#: ``results/lme_keepfrac_sweep.json`` (Figure 3): ``keep_fraction -> policy -> (mean, population std)``.
AUTHORS_FIGURE3 = {
    0.1: {"learned_V": (0.2924, 0.0222), "uniform_V": (0.2338, 0.0130), "reliability_only": (0.1787, 0.0160),
          "recency_only": (0.1264, 0.0148)},
    0.2: {"learned_V": (0.6321, 0.0144), "uniform_V": (0.4748, 0.0129), "reliability_only": (0.3505, 0.0193),
          "recency_only": (0.2577, 0.0206)},
    0.3: {"learned_V": (0.7698, 0.0114), "uniform_V": (0.6575, 0.0108), "reliability_only": (0.4974, 0.0201),
          "recency_only": (0.3676, 0.0207)},
    0.4: {"learned_V": (0.8386, 0.0204), "uniform_V": (0.7951, 0.0131), "reliability_only": (0.6815, 0.0208),
          "recency_only": (0.4623, 0.0176)},
    0.5: {"learned_V": (0.8958, 0.0119), "uniform_V": (0.8745, 0.0119), "reliability_only": (0.8976, 0.0111),
          "recency_only": (0.5409, 0.0174)},
}  # fmt: skip

#: ``results/lme_value_net_ablation.json``: the MLP against the linear value, blind (mean, population std).
AUTHORS_MLP = {"mlp": (0.7733, 0.0115), "learned_V": (0.7698, 0.0114), "mlp_minus_linear": (0.0034, 0.0131),
               "win_share": 0.55}  # fmt: skip
