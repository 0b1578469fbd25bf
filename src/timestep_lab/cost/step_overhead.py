"""Step time of each timestep sampler relative to uniform, as the controlled benchmark measured it.

``benchmarks/sampler_overhead.py`` trains the digits model once per sampler through the real
training loop, all samplers in lockstep (one step each in turn), so every sampler meets the same
machine conditions; ``benchmarks/RESULTS.md`` records its table. The study's own runs log seconds
per step too, but they share the CPUs with whatever else runs beside them (a default study runs
two jobs at once): the sampler report printed CLTS 2.1x and adaptive 2.8x from them, where the
controlled run gives 1.008x and 1.112x (issue 42). The reports quote this record; a test checks it
against RESULTS.md's table, so the two cannot drift apart. Data only.
"""

from __future__ import annotations

__all__ = ["CONTROLLED", "SOURCE"]

#: where the numbers come from: the command, the model and the table they are copied from
SOURCE = ("benchmarks/sampler_overhead.py (digits model, batch 128, T = 1000, the real train() loop, all samplers in "
          "lockstep, 5 blocks x 80 steps, 1 thread; median over blocks), benchmarks/RESULTS.md")

#: sampler -> step time over uniform's, controlled (benchmarks/RESULTS.md, `sampler_overhead.py`)
CONTROLLED: dict[str, float] = {
    "uniform": 1.000, "adaptive": 1.112, "clts": 1.008, "logit_normal": 0.997, "lognormal": 0.991,
    "loss_second_moment": 0.997, "slot_balanced": 0.995, "slots": 1.004, "speed": 0.995, "toward_zero": 0.998,
}
