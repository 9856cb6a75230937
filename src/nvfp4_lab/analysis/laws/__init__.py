"""The gap's laws: the scaling study (``scaling*``, ``holdout``, ``extrapolation``), the
steps-or-size study (``steps_vs_size*``, ``steps_law*``, ``steps_holdout``), and the paper's
gaps carried to the lab's regime by them (``carry``)."""
