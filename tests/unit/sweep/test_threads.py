"""The thread count a CPU training chooses, and when it warns that the machine is busy."""
from __future__ import annotations

import pytest

from nvfp4_lab.sweep.threads import plan


@pytest.mark.parametrize("requested, parallel, cores, load, threads, reason", [
    (0, 1, 2, 0.0, 2, "2 cores"),                              # alone: every core
    (0, 2, 2, 0.0, 1, "2 cores / 2 processes at once"),        # joblib 2 jobs: one each
    (0, 3, 8, 0.0, 2, "8 cores / 3 processes at once"),        # rounded down, never oversubscribed
    (0, 4, 2, 0.0, 1, "2 cores / 4 processes at once"),        # at least one
    (3, 2, 2, 0.0, 3, "trainer.threads"),                      # as given, even if too many
])
def test_threads_divide_the_cores_among_the_processes(requested, parallel, cores, load,
                                                      threads, reason):
    p = plan(requested, parallel, cores, load)
    assert (p.threads, p.reason, p.warning) == (threads, reason, None)
    assert str(p) == f"threads: {threads} ({reason})"


@pytest.mark.parametrize("parallel, busy, warns", [
    (1, 0, False),       # an idle machine
    (1, 1, True),        # another training holds a core this run wants
    (2, 0, False),       # the sibling job of the same sweep is not counted as busy
    (2, 1, True),        # a foreign process beside the two jobs
])
def test_a_busy_machine_is_named(parallel, busy, warns):
    p = plan(0, parallel, 2, busy)
    assert (p.warning is not None) == warns
    if warns:
        assert f"{busy} other process running on 2 cores" in p.warning
        assert "\nwarning: " in str(p)


def test_one_core_is_singular():
    assert str(plan(0, 1, 1, 0)) == "threads: 1 (1 core)"
