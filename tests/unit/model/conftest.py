"""Shared fixtures of the model tests."""
import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """The models here are tiny: two threads on two busy cores only add overhead."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
