"""From a trained model to images and their scores (the library side of ``cli/generate.py``).

``sampling``  drawing images with a solver: one seed per sample, ground-truth replacement, the
              denoiser, ``generate`` (a model file -> ``samples.npz``)
``scoring``   sampling and the metrics composed, one level above both: one run sampled and scored
              in one process (``sample-score``), FID against images seen

Must not know: training, the command line. This file imports nothing.
"""
