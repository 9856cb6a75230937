"""The paper's claims tested over the published sweeps (``claims``), each counted once
with the fresh seeds it needs (``answers``), a run read against them (``context``) and the
numbers of ``results/discussion.md`` (``discussion``)."""
