"""The book's Sphinx extension for math: formulas rendered to MathML at build time.

``_config.yml`` lists it in ``extra_extensions``: formulas written as ``$...$`` or ``$$...$$``
are rendered at build time to MathML (:func:`to_mathml`, by the pure-Python ``latex2mathml``),
which browsers display natively. No MathJax, no script, nothing fetched.
"""

from __future__ import annotations

from pathlib import Path

from memlib._safewrite import write_file


def to_mathml(latex: str, display: bool = False) -> str:
    r"""Render LaTeX math as a MathML ``<math>`` element (what the book's pages carry).

    >>> to_mathml(r"V(m) = \sum_i w_i f_i(m)").startswith('<math xmlns="http://www.w3.org/1998/Math/MathML"')
    True
    >>> 'display="block"' in to_mathml(r"\bar V", display=True)
    True
    """
    from latex2mathml.converter import convert

    return convert(latex.strip(), display="block" if display else "inline")


def _render(self, node, latex: str, display: bool) -> str:
    try:
        return to_mathml(latex, display)
    except Exception as exc:  # any converter failure is reported as a build warning (an error)
        from sphinx.util import logging

        reason = f"{type(exc).__name__}: {exc}"
        logging.getLogger(__name__).warning(f"math not rendered ({reason}): {latex!r}", location=node)
        return f"<code>{self.encode(latex)}</code>"


def _visit_math(self, node) -> None:
    from docutils import nodes

    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_render(self, node, node.astext(), display=False))
    self.body.append("</span>")
    raise nodes.SkipNode


def _visit_displaymath(self, node) -> None:
    from docutils import nodes
    from sphinx.locale import _
    from sphinx.util.math import get_node_equation_number

    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node["number"]:
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})')
        self.add_permalink_ref(node, _("Link to this equation"))
        self.body.append("</span>")
    latex = node.astext()
    if not node["nowrap"]:  # blank-line separated equations: one aligned block, as MathJax does
        parts = [p for p in latex.split("\n\n") if p.strip()]
        if len(parts) > 1:
            latex = "\\begin{aligned}" + " \\\\ ".join(parts) + "\\end{aligned}"
    self.body.append(_render(self, node, latex, display=True))
    self.body.append("</div>\n")
    raise nodes.SkipNode


#: The theme lays out ``div.math`` for MathJax's ``mjx-container``; the same for ``<math>``, and the
#: reader's own math fonts (nothing is downloaded).
MATH_CSS = """div.math > math { flex-grow: 1; overflow-x: auto; overflow-y: hidden; padding: .3rem 0; }
math { font-family: "STIX Two Math", "Latin Modern Math", "Cambria Math", "DejaVu Math TeX Gyre", math, serif;
       font-size: 1.1em; }
"""


def _write_math_css(app, exc) -> None:
    if exc is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        write_file(static / "memlib-math.css", MATH_CSS, mode=0o644)


def setup(app):
    """Sphinx entry point: register the ``mathml`` math renderer (``html_math_renderer: mathml``)."""
    app.add_html_math_renderer("mathml", (_visit_math, None), (_visit_displaymath, None))
    app.add_css_file("memlib-math.css")
    app.connect("build-finished", _write_math_css)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
