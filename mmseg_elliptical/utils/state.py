"""The random states and every module's mode, given back after work done
between two training steps (the evidence hook, the training attack)."""
import random
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch
import torch.nn as nn


@contextmanager
def kept_rng() -> Iterator[None]:
    """Restore Python's, numpy's and torch's (CPU and CUDA) random states
    on exit."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
             torch.cuda.get_rng_state_all() if cuda else None)
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if cuda:
            torch.cuda.set_rng_state_all(state[3])


@contextmanager
def kept_modes(model: nn.Module) -> Iterator[None]:
    """Put ``model`` in eval mode; give every module its own ``training``
    flag back on exit."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
