"""Every model test runs on one thread (``one_thread`` lives in tests/conftest.py)."""
import pytest


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    yield
