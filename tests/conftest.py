"""Shared fixtures: small models are built once per session (transformers import is slow)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # The executor runs one intra-op thread per rank; tests do the same and stay repeatable.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
