"""What the numbers say about the claims: paired statistics, verdicts, the family, across scales.

``stats``        paired comparisons across seeds: differences, intervals, Holm, power, speed-ups
``calibration``  what a t-statistic is referred to: Student t, or the skew envelope (the card's)
``size``         the size verdict: the paper's number with a band, as an equivalence statement
``family``       the scorecard as one family: Holm across every judged claim, both verdicts, power
``jackknife``    leave-one-model-out intervals over model pairs; the consistency contrast models vs control
``verdicts``     which runs each claim compares, per study group, and the regime (methods.md §9)
``scaling``      whether a claim holds, flips or stays unresolved across several studies (§9.9)
``sequential``   the sequential design's anytime-valid tests: safe t e-values, confidence sequences (§14)
``sequential_sim`` whole sequential studies simulated: error, coverage, power, expected cost (§14.2)
``planner``      the next stage of a sequential study under a budget, or why it stops (§14.3)

The claims themselves, in their sources' words, are :mod:`timestep_lab.claims`. Must not know:
torch, Snakemake, files. This file imports nothing.
"""
