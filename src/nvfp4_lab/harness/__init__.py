"""Downstream evaluation of trained runs through lm-evaluation-harness (the ``eval`` extra).

    checkpoint.py  a run's checkpoint as a model that scores text (no lm-eval)
    lm.py          ``LabLM``: that model as the harness's ``LM``, registered as ``nvfp4-lab``
    command.py     ``nvfp4-lab eval``: runs and sweeps scored into each run's ``eval.json``
"""
