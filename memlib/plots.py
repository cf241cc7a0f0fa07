"""Altair charts for the book (rendered as static SVG: no script from a CDN).

>>> import pandas as pd
>>> chart = retention_bars(pd.DataFrame({"policy": ["a", "b"], "retention": [0.5, 0.2]}))
>>> [layer["mark"]["type"] for layer in chart.to_dict()["layer"]]
['bar', 'text']
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd


def use_svg() -> None:
    """Render charts as inline SVG (works offline; the default renderer loads JS from a CDN)."""
    alt.renderers.enable("svg")


def retention_bars(table: pd.DataFrame, title: str = "Gold retention by policy") -> alt.Chart:
    """Horizontal bars of ``retention`` per ``policy``, in table order, with value labels."""
    order = list(table["policy"])
    base = alt.Chart(table).encode(
        y=alt.Y("policy:N", sort=order, title=None),
        x=alt.X("retention:Q", scale=alt.Scale(domain=[0, 1]), title="gold retention"),
    )
    bars = base.mark_bar(color="#4c78a8")
    labels = base.mark_text(align="left", dx=3).encode(text=alt.Text("retention:Q", format=".2f"))
    return (bars + labels).properties(title=title, width=420, height=22 * len(order))


def weight_bars(weights: pd.DataFrame, title: str = "Learned weights") -> alt.Chart:
    """Bars of learned ``weight`` per ``factor``; dead factors are drawn grey."""
    return (
        alt.Chart(weights)
        .mark_bar()
        .encode(
            y=alt.Y("factor:N", sort=list(weights["factor"]), title=None),
            x=alt.X("weight:Q", title="weight"),
            color=alt.Color(
                "live:N", scale=alt.Scale(domain=[True, False], range=["#f58518", "#bbbbbb"]), title="live factor"
            ),
        )
        .properties(title=title, width=420, height=22 * len(weights))
    )


def factor_histograms(table: pd.DataFrame, factors, color: str = "role", bins: int = 20) -> alt.Chart:
    """One histogram per factor (rows of ``table`` are turns), coloured by ``color``.

    Counts are binned in pandas first, so the chart stays small for any number of turns.
    """
    edges = np.linspace(0.0, 1.0, bins + 1)
    parts = []
    for f in factors:
        for key, grp in table.groupby(color):
            counts, _ = np.histogram(grp[f].clip(0, 1), bins=edges)
            parts.append(pd.DataFrame({"factor": f, color: key, "lo": edges[:-1], "hi": edges[1:], "turns": counts}))
    binned = pd.concat(parts, ignore_index=True)
    return (
        alt.Chart(binned)
        .mark_bar(opacity=0.8)
        .encode(
            x=alt.X("lo:Q", bin="binned", title="factor value"),
            x2="hi:Q",
            y=alt.Y("turns:Q", title="turns", stack=None),
            color=alt.Color(f"{color}:N"),
        )
        .properties(width=200, height=120)
        .facet(facet=alt.Facet("factor:N", title=None), columns=2)
        .resolve_scale(y="independent")
    )


def correlation_heatmap(corr: pd.DataFrame) -> alt.Chart:
    """Heatmap of a tidy correlation table (``a``, ``b``, ``r``)."""
    base = alt.Chart(corr).encode(x=alt.X("a:N", title=None), y=alt.Y("b:N", title=None))
    cells = base.mark_rect().encode(color=alt.Color("r:Q", scale=alt.Scale(domain=[-1, 1], scheme="redblue")))
    text = base.mark_text().encode(text=alt.Text("r:Q", format=".2f"))
    return (cells + text).properties(width=260, height=260, title="Correlation between live factors")


def gold_percentile_bars(summary: pd.DataFrame) -> alt.Chart:
    """Mean percentile of gold turns by goal relevance, per regime (0.5 = chance)."""
    bars = (
        alt.Chart(summary)
        .mark_bar()
        .encode(
            x=alt.X("gold_percentile:Q", scale=alt.Scale(domain=[0, 1]), title="mean percentile of gold turns"),
            y=alt.Y("regime:N", title=None),
            color=alt.Color("regime:N", legend=None),
        )
    )
    chance = alt.Chart(pd.DataFrame({"x": [0.5]})).mark_rule(strokeDash=[4, 4]).encode(x="x:Q")
    return (bars + chance).properties(width=380, height=80, title="Where gold turns rank by goal relevance")


def regime_bars(summary: pd.DataFrame, title: str = "Gold retention: oracle vs blind") -> alt.Chart:
    """Figure 2: grouped bars of mean retention per policy and regime, with +-1 std rules."""
    d = summary.assign(lo=summary["mean"] - summary["std"], hi=summary["mean"] + summary["std"])
    order = list(dict.fromkeys(d["policy"]))
    base = alt.Chart(d).encode(
        x=alt.X("policy:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30)),
        xOffset=alt.XOffset("regime:N", sort=["oracle", "blind"]),
    )
    bars = base.mark_bar().encode(
        y=alt.Y("mean:Q", scale=alt.Scale(domain=[0, 1]), title="gold retention (mean over splits)"),
        color=alt.Color("regime:N", sort=["oracle", "blind"], scale=alt.Scale(range=["#bab0ac", "#4c78a8"])),
    )
    err = base.mark_rule(color="black").encode(y="lo:Q", y2="hi:Q")
    return (bars + err).properties(width=460, height=260, title=title)


def weight_spread(weights: pd.DataFrame, title: str = "Learned weights over splits") -> alt.Chart:
    """Learned weights per factor and regime: a dot per split and the mean as a tick."""
    d = weights[weights.groupby("factor")["weight"].transform("max") > 0]
    dots = (
        alt.Chart(d)
        .mark_circle(opacity=0.4, size=30)
        .encode(
            x=alt.X("weight:Q"),
            y=alt.Y("factor:N", title=None),
            color=alt.Color("regime:N"),
            yOffset=alt.YOffset("regime:N"),
        )
    )
    means = (
        alt.Chart(d)
        .mark_tick(thickness=3, size=14, color="black")
        .encode(x="mean(weight):Q", y="factor:N", yOffset=alt.YOffset("regime:N"))
    )
    return (dots + means).properties(width=420, height=180, title=title)


def sweep_lines(summary: pd.DataFrame, title: str = "Keep-fraction sweep (blind)") -> alt.Chart:
    """Figure 3: mean retention against keep fraction per policy, with a +-1 std band."""
    d = summary.assign(lo=summary["mean"] - summary["std"], hi=summary["mean"] + summary["std"])
    base = alt.Chart(d).encode(
        x=alt.X("keep_fraction:Q", title="keep fraction", scale=alt.Scale(zero=False)), color=alt.Color("policy:N")
    )
    band = base.mark_area(opacity=0.15).encode(y="lo:Q", y2="hi:Q")
    line = base.mark_line(point=True).encode(y=alt.Y("mean:Q", title="gold retention", scale=alt.Scale(domain=[0, 1])))
    return (band + line).properties(width=440, height=280, title=title)


def paired_splits(
    per_split: pd.DataFrame, a: str = "learned_V", b: str = "mlp", title: str = "Per split: linear value vs MLP"
) -> alt.Chart:
    """One point per split: retention of policy ``a`` (x) against policy ``b`` (y), with the diagonal."""
    wide = per_split.pivot_table(index="split", columns="policy", values="retention").reset_index()
    lo = float(min(wide[a].min(), wide[b].min())) - 0.01
    hi = float(max(wide[a].max(), wide[b].max())) + 0.01
    pts = (
        alt.Chart(wide)
        .mark_circle(size=60)
        .encode(
            x=alt.X(f"{a}:Q", scale=alt.Scale(domain=[lo, hi], zero=False), title=f"{a} retention"),
            y=alt.Y(f"{b}:Q", scale=alt.Scale(domain=[lo, hi], zero=False), title=f"{b} retention"),
        )
    )
    scale = alt.Scale(domain=[lo, hi], zero=False)
    diag = (
        alt.Chart(pd.DataFrame({"x": [lo, hi], "y": [lo, hi]}))
        .mark_line(strokeDash=[4, 4], color="grey")
        .encode(x=alt.X("x:Q", scale=scale), y=alt.Y("y:Q", scale=scale))
    )
    return (diag + pts).properties(width=300, height=300, title=title)


def stream_lines(table: pd.DataFrame, metric: str, k: int | None = None, title: str | None = None) -> alt.Chart:
    """Plot a streaming metric against the memory budget, one line per policy."""
    d = table if k is None else table[table["k"] == k]
    d = d.drop_duplicates(["policy", "budget"]) if metric == "retention" else d
    return (
        alt.Chart(d)
        .mark_line(point=True)
        .encode(
            x=alt.X("budget:Q", title="memory budget (share of the history)"),
            y=alt.Y(f"{metric}:Q", scale=alt.Scale(domain=[0, 1]), title=metric),
            color=alt.Color("policy:N"),
        )
        .properties(width=300, height=240, title=title or (metric if k is None else f"{metric}@{k}"))
    )


def hazard_lines(hazard: pd.DataFrame, title: str = "Referred back to, and asked about, by age") -> alt.Chart:
    """Plot each corpus's relative rate of references and of gold by age in sessions (one panel per corpus).

    ``hazard`` is :attr:`memlib.studies.need.NeedResult.hazard`: a rate of 1 is the corpus's mean
    over every age, so the two kinds share one scale.
    """
    order = list(dict.fromkeys(hazard["sessions_ago"]))
    return (
        alt.Chart(hazard.dropna(subset=["relative"]))
        .mark_line(point=True)
        .encode(
            x=alt.X("sessions_ago:O", sort=order, title="sessions ago"),
            y=alt.Y("relative:Q", title="rate per turn at risk / mean rate"),
            color=alt.Color("kind:N", title=None),
        )
        .properties(width=220, height=200)
        .facet(column=alt.Column("dataset:N", title=None), title=title)
    )


def transfer_heatmap(summary: pd.DataFrame, model: str, title: str | None = None) -> alt.Chart:
    """Test retention of one value ``model``: a row per place it was learned, a column per test corpus.

    ``summary`` is :func:`memlib.studies.transfer.summarise`'s table; each cell shows the mean and
    its 95% interval over the test corpus's groups.

    >>> s = pd.DataFrame({"model": "m", "train": ["in_domain", "x"], "test": "y", "mean": [0.7, 0.5],
    ...                   "low": [0.6, 0.4], "high": [0.8, 0.6]})
    >>> [layer["mark"]["type"] for layer in transfer_heatmap(s, "m").to_dict()["layer"]]
    ['rect', 'text']
    """
    d = summary[summary["model"] == model].assign(
        label=lambda t: [f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for m, lo, hi in zip(t["mean"], t["low"], t["high"])]
    )
    first = ["in_domain", "others", "others_worst_case", "uniform"]
    order = [r for r in first if r in set(d["train"])] + sorted(set(d["train"]) - set(first))
    base = alt.Chart(d).encode(x=alt.X("test:N", title="tested on"), y=alt.Y("train:N", sort=order, title="learned on"))
    cells = base.mark_rect().encode(
        color=alt.Color("mean:Q", scale=alt.Scale(domain=[0, 1], scheme="blues"), title="gold held")
    )
    text = base.mark_text(fontSize=11).encode(
        text="label:N", color=alt.condition("datum.mean > 0.6", alt.value("white"), alt.value("black"))
    )
    return (cells + text).properties(width=420, height=36 * len(order), title=title or f"{model}: blind gold held")


def ladder_waterfall(
    ladder: pd.DataFrame, title: str = "From the released experiment to memlib's Table 1"
) -> alt.Chart:
    """Draw a waterfall of :func:`memlib.studies.released.ladder`, one bar per rung.

    The first bar is its ``learned_V``; each later bar floats from the rung
    above to its own value (green up, red down), with the change printed.

    >>> t = pd.DataFrame({"step": [0, 1], "rung": ["a", "b"], "learned_V": [0.7, 0.65], "delta": [np.nan, -0.05]})
    >>> [layer["mark"]["type"] for layer in ladder_waterfall(t).to_dict()["layer"]]
    ['bar', 'text']
    """
    t = ladder.copy()
    lo = max(0.0, float(t["learned_V"].min()) - 0.05)
    hi = min(1.0, float(t["learned_V"].max()) + 0.05)
    t["start"] = t["learned_V"].shift(1).fillna(lo)
    t["end"] = t["learned_V"]
    t["change"] = np.where(t["delta"].isna(), "start", np.where(t["delta"] >= 0, "up", "down"))
    t["label"] = [f"{v:.3f}" if np.isnan(d) else f"{d:+.3f}" for v, d in zip(t["learned_V"], t["delta"])]
    order = list(t["rung"])
    base = alt.Chart(t).encode(y=alt.Y("rung:N", sort=order, title=None))
    bars = base.mark_bar().encode(
        x=alt.X("start:Q", title="blind learned_V (gold retention)", scale=alt.Scale(domain=[lo, hi], clamp=True)),
        x2="end:Q",
        color=alt.Color(
            "change:N",
            scale=alt.Scale(domain=["start", "up", "down"], range=["#4c78a8", "#54a24b", "#e45756"]),
            legend=None,
        ),
    )
    labels = base.mark_text(align="left", dx=4).encode(x=alt.X("end:Q"), text="label:N")
    return (bars + labels).properties(title=title, width=420, height=24 * len(order))
