"""What a run leaves on disk, and how it is written and read back.

``checksums``     the sha256 of an artifact's content, which the artifact carries inside itself
``io``            atomic writes, checked ``.pt``/``.npz``/JSON artifacts, ``ArtifactError``
``unpickle``      why torch refused a pickle: code it would run, or damage
``samples_file``  the ``samples.npz`` format (written by sampling, read by the metrics and analyses)
``runlock``       one writer per run folder
``identity``      the code identity (commit, dirty flag, source and lock sha256) stored with results
``events``        TensorBoard event files: live curves of one run

Bottom layer: nothing here imports another package of timestep_lab. This file imports nothing, so
a torch-free reader (the workflow at DAG build) pays only for the module it names.
"""
