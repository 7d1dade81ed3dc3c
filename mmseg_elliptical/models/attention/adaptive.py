"""The adaptive attack's switch: the gradient through ``m``, per model."""
from contextlib import contextmanager
from typing import Iterator

import torch.nn as nn

from .core import EllipticalAttentionMixin


@contextmanager
def adaptive_relevance(model: nn.Module,
                       on: bool = True) -> Iterator[nn.Module]:
    """Set ``adaptive`` to ``on`` on ``model``'s elliptical attentions while
    open, then restore each; other models (threads, workers) keep theirs.

    Args:
        model (nn.Module): The model, or a part of it.
        on (bool): The mode inside.

    Yields:
        nn.Module: ``model``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f'adaptive_relevance(model, on=True) takes the model '
                        f'whose attentions it switches, not {model!r}')
    found = [
        a for a in model.modules() if isinstance(a, EllipticalAttentionMixin)
    ]
    saved = [a.adaptive for a in found]
    for a in found:
        a.adaptive = bool(on)
    try:
        yield model
    finally:
        for a, mode in zip(found, saved):
            a.adaptive = mode
