"""A sweep, before and around its jobs: its plan (``plan``: the jobs, their estimates, the
cores they share), the dry run (``preview``), the Hydra callback that checks every arm first and
summarises after the last (``callback``), the threads each job takes (``threads``) and the
machine class a run records (``machine``). Imports no Lightning."""
