"""Fixtures shared by the tests (helpers in ``helpers.py``, oracles in
``oracles.py``, whose asserts pytest rewrites as the tests' own)."""
import pytest

pytest.register_assert_rewrite('helpers', 'oracles')

from helpers import TINY_GENERATE  # noqa: E402


@pytest.fixture(scope='session')
def demo_root(tmp_path_factory) -> str:
    """A small demo dataset generated once per session."""
    from mmseg_elliptical.datasets import generate_demo_shapes
    root = str(tmp_path_factory.mktemp('data') / 'demo_shapes')
    generate_demo_shapes(root, **TINY_GENERATE)
    return root


@pytest.fixture(scope='module')
def single_thread():
    """Run a module's tests with one torch thread, then restore the count.

    On a shared 2-core machine two OpenMP threads spin-wait on each other
    whenever another process holds a core: the tiny test models then run up
    to 100x slower than with one thread. Subprocesses get
    ``OMP_NUM_THREADS=1`` from the tests that start them.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
