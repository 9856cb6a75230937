"""The operand table's metrics.csv column names: a layer statistic is named and read back by
one type, never by a pattern."""
from __future__ import annotations

import pytest

from nvfp4_lab.quant.operands import LayerMetric


@pytest.mark.parametrize(("column", "layer", "source", "metric", "block"), [
    ("blocks.3.mlp.fc1/wgrad/rel_err", "blocks.3.mlp.fc1", "wgrad", "rel_err", 3),
    ("blocks.12.attn.qkv/fprop.x/top_bin", "blocks.12.attn.qkv", "fprop.x", "top_bin", 12),
    ("lm_head/wgrad.dy/noise_ratio", "lm_head", "wgrad.dy", "noise_ratio", -1),
])
def test_a_layer_column_is_read_back_into_its_parts(column, layer, source, metric, block):
    m = LayerMetric.parse(column)
    assert m == LayerMetric(layer, source, metric) and m.block == block
    assert m.column == column and m.name == f"{source}/{metric}"


@pytest.mark.parametrize("column", [
    "train_loss", "val_loss", "lr-AdamW", "tokens", "epoch",   # the curve's own columns
    "blocks.0.fc1/fprop.q/rel_err",                           # no such operand
    "blocks.0.fc1/fprop.x/",                                  # no metric
    "fprop.x/rel_err",                                        # no layer
])
def test_other_columns_are_not_layer_metrics(column):
    assert LayerMetric.parse(column) is None
