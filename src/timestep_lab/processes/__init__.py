"""The forward processes and what belongs to each: how x_t is made from x0 and how it is undone.

``registry``     ``PROCESSES`` (``diffusion.kind``: ``gaussian``, ``flow``) and ``make_process``
``diffusion``    ``GaussianDiffusion``: q_sample, posterior, eps/x0/v conversions, VLB terms
``flow``         ``RectifiedFlow``: SD3's rectified flow on the same grid, the timestep shift
``schedules``    named noise schedules -> ``alpha_bar [T]``
``predictions``  what the network predicts (``eps``, ``x0``, ``v``, ``mixed``): loss and estimates
``solvers``      the reverse samplers ``SOLVERS`` (``sample.method``): DDPM, DDIM, Euler, Heun
``timeranges``   a paper's 1-based timestep ranges on T = 1000 -> ours (torch-free)

Must not know: networks, timestep samplers, training, files. This file imports nothing, so the
workflow's torch-free modules can import ``timeranges`` without torch.
"""
