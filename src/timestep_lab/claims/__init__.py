"""The claims a study judges, in the sources' own words: one record per scorecard row
(docs/methods.md §9, docs/design.md §6.1).

* :mod:`.record`: what a claim record is (:class:`Source`, :class:`PaperNumber`, :class:`Claim`);
* :mod:`.papers`: the four papers' claims;
* :mod:`.flow`: the flow-matching questions (docs/methods.md §12.5).

:data:`CLAIMS` lists them all in scorecard order; :func:`timestep_lab.evidence.verdicts.judge_claims`
measures and judges them. Adding a claim: append it to the list of its module (ids are never
reused). Data only: pure Python.
"""

from __future__ import annotations

from timestep_lab.claims.flow import FLOW_BASELINE, FLOW_CLAIMS, FLOW_GROUP, QUESTION_OF, QUESTIONS
from timestep_lab.claims.papers import CONSTANT_BASE, PAPER_CLAIMS, UNIFORM
from timestep_lab.claims.record import JUDGED_AT, NUMBER_KINDS, STATUSES, Claim, PaperNumber, Source

__all__ = ["Source", "PaperNumber", "Claim", "CLAIMS", "PAPER_CLAIMS", "FLOW_CLAIMS", "FLOW_GROUP", "FLOW_BASELINE",
           "QUESTIONS", "QUESTION_OF", "STATUSES", "JUDGED_AT", "NUMBER_KINDS", "UNIFORM", "CONSTANT_BASE",
           "claim_by_id"]

CLAIMS: tuple[Claim, ...] = PAPER_CLAIMS + FLOW_CLAIMS


def claim_by_id(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (KeyError naming the known ids otherwise)."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


assert len({c.id for c in CLAIMS}) == len(CLAIMS), "claim ids must be unique"
