"""The console script's process-wide settings (``cli.py``)."""
from __future__ import annotations

import warnings

import torch.utils._pytree as torch_pytree
from lightning.pytorch.utilities import _pytree as lightning_pytree

from nvfp4_lab import cli


def test_the_cli_silences_lightnings_leafspec_notice_and_nothing_else(capsys):
    """Lightning's pytree helper builds torch's deprecated ``LeafSpec`` on every logged step;
    once the command has started that notice is gone, while the same notice raised by any
    other code still shows."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["--version"]) == 0
        lightning_pytree._tree_flatten(1.0)     # a leaf: Lightning builds a LeafSpec
        torch_pytree.LeafSpec()                 # the same, from here
    notices = [w for w in caught if "LeafSpec" in str(w.message)]
    assert [w.filename for w in notices] == [__file__], [(w.filename, w.lineno) for w in notices]
    assert capsys.readouterr().out.startswith("nvfp4-lab ")
