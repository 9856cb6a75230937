"""``QuantLinear``'s RHT sign vectors, kept on the device across steps: each call gets its
policy's vector, never a stale one from another step, layer or call."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from nvfp4_lab.formats.hadamard import sign_vector
from nvfp4_lab.quant import QuantLinear, preset
from nvfp4_lab.quant.recipe import RHTConfig


@pytest.mark.parametrize("policy", ["fixed", "per_layer", "per_step", "per_call"])
def test_layer_signs_are_the_policys_vectors(policy):
    recipe = dataclasses.replace(preset("nvfp4"), rht=RHTConfig(size=32, signs=policy, seed=3))
    layers = [QuantLinear(32, 32, recipe=recipe, index=i) for i in (0, 1)]
    for step in (0, 1, 0):
        for layer in layers:
            layer.state.step = step
            for slot in (0, 1):
                layer.state.slot = slot
                call = 2 + 3 * slot  # Wgrad is GEMM number 2 of 0..2, per slot
                want = sign_vector(32, policy, 3, layer.index, step, call)
                assert torch.equal(layer.signs("wgrad", layer.plan), want)
                assert layer.signs("fprop", layer.plan) is None  # no transform there
