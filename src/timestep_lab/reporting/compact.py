"""The compact verdict table of a group report: claim, verdict, paired difference [95% CI], n in
four columns that fit the page, every other scorecard field (the quote, the test's wording, Holm
p, size, detectable effect, speed-up, log-ratio check, regime) folded under its row in
``<details>``. Input: :func:`timestep_lab.reporting.scorecard.scorecard_rows`; output: HTML."""

from __future__ import annotations

from html import escape
from typing import Mapping

from timestep_lab.reporting.scorecard import COLUMNS

__all__ = ["compact_table"]

_SHOWN = ("verdict", "difference", "n")


def compact_table(rows: list[Mapping[str, str]]) -> str:
    """``<table class="text scorecard">`` of ``rows``; every value escaped, in a ``data-key`` element."""
    out = ['<table class="text scorecard">',
           "<tr><th>claim (source, where)</th><th>verdict</th><th>our paired difference [95% CI]</th>"
           "<th>n seeds</th></tr>"]
    for r in rows:
        folded = "".join(f'<dt>{escape(h)}</dt><dd data-key="{k}">{escape(r[k])}</dd>'
                         for k, h in COLUMNS if k not in _SHOWN)
        out.append(f'<tr class="verdict-{escape(r["verdict"].replace(" ", "-"))}"><td><span data-key="id">'
                   f'{escape(r["id"])}</span>: {escape(r["paper"])}, {escape(r["where"])} <i>({escape(r["status"])})</i>'
                   f"<details><summary>its words, our test, detectable effect, reasons</summary><dl>{folded}</dl>"
                   f'</details></td><td><b data-key="verdict">{escape(r["verdict"])}</b></td>'
                   f'<td class="num" data-key="difference">{escape(r["difference"])}</td>'
                   f'<td class="num" data-key="n">{escape(r["n"])}</td></tr>')
    out.append("</table>")
    return "\n".join(out)
