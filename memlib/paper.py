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
