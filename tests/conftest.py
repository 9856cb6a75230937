"""Fixtures shared by all tests."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """The GEMMs of the tiny test models are small: two threads on two busy cores are ~10x
    slower than one."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
