"""What a study costs: predicted before it runs, measured after, from one account of a job.

``usage``     the usage line a finished command writes last to its stderr (exact CPU and peak RSS)
``measured``  a finished study's cost per rule, from its jobs' benchmark files and usage lines
``step_overhead`` each sampler's step time over uniform's from the controlled benchmark (reports quote it)
``estimate``  the cost before it runs (jobs, images, FLOPs, hours per rule), calibrated on this
              machine against what ``measured`` reads

``benchmarks/study_cost.py`` prints ``measured``'s table. This file imports nothing: the entry
imports ``usage`` as a command starts.
"""
