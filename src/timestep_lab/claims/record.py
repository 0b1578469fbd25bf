"""What a claim record is (docs/design.md §6.1, ``verdicts.json``): :class:`Source`,
:class:`PaperNumber`, :class:`Claim`. The claims themselves are data in :mod:`.papers` (the four
papers) and :mod:`.flow` (the flow-matching questions).

Each :class:`Claim` says who claims it (:class:`Source`) and where
(section, figure or table), quotes the source's own words, says whether it is a *finding* the
source reports or a *hypothesis* it puts forward, states the direction it predicts, carries the
source's numbers with their units (:class:`PaperNumber`, each saying whether it is comparable
with what we measure and, if not, why), says whether it is a claim about *speed* (judged at any
training length) or about *convergence* (judged only by a study trained long enough,
docs/methods.md §9.7), names the runs that test it and, for a question users ask rather than
a paper's claim, the threads where they ask it (``asked_in``).
:func:`timestep_lab.evidence.verdicts.judge_claims` measures and judges them and ``verdicts.json`` carries
every field of the record (:meth:`Claim.record`) beside both verdicts. Pure Python.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

__all__ = ["Source", "PaperNumber", "Claim", "STATUSES", "JUDGED_AT", "NUMBER_KINDS"]

#: What a claim is in its source: something it reports having observed, or something it proposes.
STATUSES = ("finding", "hypothesis")
#: When a claim can be judged: "any length" (speed: which arm is ahead at equal images seen) or
#: "convergence" (the converged model; only in a study whose baseline has stopped improving).
JUDGED_AT = ("any length", "convergence")
#: Kinds of published numbers: a training speed-up (x), a pair of FIDs (baseline -> method), slot
#: ranges, or anything else (a rank, a step count), which is never comparable with ours.
NUMBER_KINDS = ("speedup", "fid_pair", "slots", "other")


@dataclass(frozen=True)
class Source:
    """Who makes a claim. ``ref``: arXiv id or address; ``held``: what of its text we hold."""

    key: str
    cite: str
    ref: str
    title: str
    held: str

    @property
    def label(self) -> str:
        """``"SpeeD (2405.17403)"``: the scorecard's paper column."""
        return f"{self.cite} ({self.ref.removeprefix('arXiv ')})"


@dataclass(frozen=True)
class PaperNumber:
    """A number a source publishes for a claim, with its unit and setting.

    ``kind`` "speedup": ``low``..``high`` (equal for a single number) in ``unit`` (x: training
    images the baseline needs over those the method needs to reach the same FID); "fid_pair":
    ``baseline`` -> ``method`` FIDs; "slots": a table. ``text`` is how the source writes it.
    ``not_comparable`` is empty when our measurement answers the same question in the same unit,
    else the reason it cannot be set against ours (the size verdict prints it).
    """

    kind: str
    text: str
    unit: str
    setting: str
    where: str
    source: str
    low: float | None = None
    high: float | None = None
    baseline: float | None = None
    method: float | None = None
    not_comparable: str = ""

    def __post_init__(self) -> None:
        if self.kind not in NUMBER_KINDS:
            raise ValueError(f"PaperNumber.kind must be one of {NUMBER_KINDS}, got {self.kind!r}")
        if self.kind == "other" and not self.not_comparable:
            raise ValueError(f"a number of kind 'other' is never comparable: say why ({self.text!r})")
        if self.kind == "speedup" and not self.not_comparable and (self.low is None or self.high is None):
            raise ValueError(f"a comparable speed-up needs low and high: {self.text!r}")


@dataclass(frozen=True)
class Claim:
    """One claim and how a study tests it.

    Record: ``source``, ``where`` (section, figure or table), ``quote`` (the source's words),
    ``status`` (:data:`STATUSES`), ``statement`` (what we test, in one line), ``direction`` (the
    predicted sign in words), ``numbers`` (:class:`PaperNumber`; the first comparable one is what
    the size verdict judges), ``judged_at`` (:data:`JUDGED_AT`), ``note``.

    Test: ``kind="fid"``: the final-FID difference ``arm - baseline`` in ``group`` should have
    sign ``expected_sign`` (-1: the arm reaches a lower FID); ``arm``/``baseline`` select arms by
    run axes (:func:`timestep_lab.evidence.verdicts.select_arm`). ``kind="analysis"``: the effect of the
    analysis ``analysis`` (``{"diff", "ci_low", "ci_high", "p", "sd", "n"}``). ``needs``: what a
    study must run to test it ("not run" prints it).
    """

    id: str
    source: Source
    where: str
    quote: str
    status: str
    statement: str
    direction: str
    expected_sign: int
    needs: str
    kind: str = "fid"
    group: str = ""
    arm: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] = field(default_factory=dict)
    analysis: str = ""
    judged_at: str = "any length"
    numbers: tuple[PaperNumber, ...] = ()
    note: str = ""
    asked_in: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"claim {self.id}: status must be one of {STATUSES}, got {self.status!r}")
        if self.judged_at not in JUDGED_AT:
            raise ValueError(f"claim {self.id}: judged_at must be one of {JUDGED_AT}, got {self.judged_at!r}")
        if self.expected_sign not in (-1, 1) or self.kind not in ("fid", "analysis"):
            raise ValueError(f"claim {self.id}: expected_sign -1/+1 and kind fid/analysis")

    @property
    def paper(self) -> str:
        return self.source.label

    def record(self) -> dict[str, Any]:
        """Every field, JSON-ready: what ``verdicts.json`` carries for the claim (docs/design.md)."""
        out = asdict(self)
        out["source"] = {**asdict(self.source), "label": self.source.label}
        out["arm"], out["baseline"] = dict(self.arm), dict(self.baseline)
        out["numbers"] = [asdict(n) for n in self.numbers]
        out["asked_in"] = list(self.asked_in)
        return out
