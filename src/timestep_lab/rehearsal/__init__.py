"""Rehearse a study before paying for it: a scaled-down copy on fake data and random weights,
run end to end on CPU (``python -m timestep_lab rehearse STUDY.yaml``).

=================  ==================================================================  ====================
module             holds                                                               imports
=================  ==================================================================  ====================
``scale``          the study config -> the rehearsal's (tiny sizes, stand-in paths)    stdlib, workflow
``fake_data``      raw data in each data set's true on-disk format                     numpy, PIL
``fake_weights``   random Inception (both libraries' formats), rehearsal-cnn, and a    torch (lazily the
                   pretrained reference per ``reference.format``                       libraries)
``stand_ins``      write each stand-in once, where the rehearsal config says           the two above
``needs``          what a real run needs that the rehearsal stood in for               stdlib
``command``        the ``rehearse`` command (``timestep_lab.cli.rehearse`` registers)   all of the above
=================  ==================================================================  ====================

A rehearsal is a study of its own, ``<study>-rehearsal``, with a ``rehearsal`` section that puts a
banner on its index: nothing it produces can be taken for a result. This ``__init__`` imports
nothing: the CLI registers the command without loading torch.
"""
