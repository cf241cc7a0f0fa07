"""Altair charts for the book (rendered as static SVG: no script from a CDN).

>>> import pandas as pd
>>> chart = retention_bars(pd.DataFrame({"policy": ["a", "b"], "retention": [0.5, 0.2]}))
>>> [layer["mark"]["type"] for layer in chart.to_dict()["layer"]]
['bar', 'text']
"""

from __future__ import annotations

import altair as alt
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
            color=alt.Color("live:N", scale=alt.Scale(domain=[True, False], range=["#f58518", "#bbbbbb"]),
                            title="live factor"),
        )
        .properties(title=title, width=420, height=22 * len(weights))
    )
