"""What an attack runs when the gradient-masking audit fails (Athalye et
al., ICML 2018): BPDA through a non-differentiable data preprocessor
(:func:`bpda_logits`) and EOT over a random one (:func:`eot_forward`). The
evaluated model is unchanged; only the function the attack differentiates
is."""
from typing import Callable, List, Sequence

import torch
from mmseg.models import SegDataPreProcessor
from torch import Tensor

from ...errors import AnalysisError


def bpda_logits(model, images: Sequence[Tensor], samples: List) -> List:
    """The segmentation logits ``[C, H, W]`` of the model's own
    preprocessing, differentiated as if its transform were the identity.

    Raises:
        AnalysisError: The preprocessor is no ``SegDataPreProcessor``, or its
            transform changes the input's shape.
    """
    pre = model.data_preprocessor
    if not isinstance(pre, SegDataPreProcessor):
        raise AnalysisError(
            f'BPDA needs a SegDataPreProcessor (or a subclass) to pass the '
            f'gradient through, not {type(pre).__name__}: attack the model '
            'without --bpda.')
    batch = dict(inputs=list(images), data_samples=samples)
    with torch.no_grad():
        own = pre(dict(batch, inputs=[x.detach() for x in images]), False)
    plain = SegDataPreProcessor.forward(pre, batch, False)
    if own['inputs'].shape != plain['inputs'].shape:
        raise AnalysisError(
            f'BPDA needs a preprocessor that keeps the input\'s shape: '
            f'{type(pre).__name__} gives {tuple(own["inputs"].shape)}, '
            f'the plain one {tuple(plain["inputs"].shape)}.')
    inputs = plain['inputs'] + (own['inputs'] - plain['inputs']).detach()
    out = model.predict(inputs, own['data_samples'])
    return [s.seg_logits.data for s in out]


def eot_forward(forward: Callable[[List[Tensor]], List[Tensor]],
                draws: int) -> Callable[[List[Tensor]], List[Tensor]]:
    """``forward`` over ``draws`` calls, each image's logits of the draws
    stacked along the height (``[C, draws * H, W]``): against labels tiled
    by :func:`eot_labels`, a per-pixel loss is the mean of the draws' losses
    and an accuracy the mean of theirs (Athalye et al.'s expectation of the
    loss; the loss of the mean logits leaves each draw more accurate,
    docs/evidence.md)."""

    def stacked(xs: List[Tensor]) -> List[Tensor]:
        runs = [forward(xs) for _ in range(draws)]
        return [torch.cat(logits, dim=-2) for logits in zip(*runs)]

    return stacked


def eot_labels(labels: Sequence[Tensor], draws: int) -> List[Tensor]:
    """``[H, W]`` labels tiled to :func:`eot_forward`'s ``[draws * H, W]``.
    """
    return [lb.repeat(draws, 1) for lb in labels]


def is_random(forward: Callable[[List[Tensor]], List[Tensor]],
              xs: List[Tensor]) -> bool:
    """Whether two calls of ``forward`` on ``xs`` differ (EOT averages
    nothing on a deterministic model: the plain attack is the same)."""
    with torch.no_grad():
        first, second = forward(xs), forward(xs)
    return any(not torch.equal(a, b) for a, b in zip(first, second))
