import os
import sys

import pytest

# This clone's package first (never an older clone's), and the tests' helpers.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]


@pytest.fixture
def one_thread():
    """One intra-op thread for the test, as a pipeline rank runs; the old count restored after.
    torch imported here, so the tests that run without it still load this file."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
