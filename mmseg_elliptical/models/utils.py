"""Turn mmseg transformer layers elliptical and thread values through them."""
from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Optional, Sequence, Tuple

import numpy as np
import torch.utils.checkpoint as cp
from mmengine.model import ModuleList
from torch import Tensor

from .elliptical_attention import EllipticalAttention, check_estimator_args


def check_elliptical_layers(elliptical_layers: Optional[Sequence[int]],
                            num_layers: int, owner: str) -> Tuple[int, ...]:
    """Validate ``elliptical_layers`` and resolve the default.

    Args:
        elliptical_layers (Sequence[int], optional): Indices of the layers
            with elliptical attention; None means every layer but 0.
        num_layers (int): Number of layers.
        owner (str): Class name, for the error message.

    Returns:
        tuple[int, ...]: Sorted layer indices.
    """
    valid = f'distinct integers in 1..{num_layers - 1}' if num_layers > 1 \
        else 'an empty list (a single layer has no previous values)'
    if elliptical_layers is None:
        return tuple(range(1, num_layers))
    if not isinstance(elliptical_layers, Iterable) or isinstance(
            elliptical_layers, (str, bytes, Mapping)):
        raise ValueError(f'{owner}: elliptical_layers={elliptical_layers!r} '
                         f'must be a list of {valid}.')
    items = tuple(elliptical_layers)  # also a generator, read once
    if not all(
            isinstance(i, Integral) and not isinstance(i, (bool, np.bool_))
            for i in items):
        raise ValueError(f'{owner}: elliptical_layers={elliptical_layers!r} '
                         f'must be a list of {valid}, not of '
                         f'{sorted({type(i).__name__ for i in items})}.')
    layers = [int(i) for i in items]  # numpy integers become ints
    bad = [i for i in layers if not 1 <= i < num_layers]
    if bad:
        reason = ('layer 0 has no previous layer\'s values and stays '
                  'dot-product; ' if 0 in bad else '')
        raise ValueError(f'{owner}: elliptical_layers={layers!r} contains '
                         f'{bad}: {reason}valid are {valid}.')
    if len(set(layers)) != len(layers):
        raise ValueError(f'{owner}: elliptical_layers={layers!r} has '
                         f'duplicates; valid are {valid}.')
    return tuple(sorted(layers))


def make_elliptical(layers: ModuleList,
                    elliptical_layers: Optional[Sequence[int]],
                    reduction: str, eps: float, owner: str) -> Tuple[int, ...]:
    """Replace the attention of mmseg ``TransformerEncoderLayer`` s in place.

    Every layer gets an :class:`EllipticalAttention` (so each returns its
    values for the next); those in ``elliptical_layers`` score elliptically,
    the others keep dot-product scores. Parameters are taken over, not
    re-initialised. The arguments are validated first.

    Args:
        layers (ModuleList): mmseg ``TransformerEncoderLayer`` s.
        elliptical_layers (Sequence[int], optional): See
            :func:`check_elliptical_layers`.
        reduction (str): Estimator reduction, ``'mean'`` or ``'median'``.
        eps (float): Guard of the max-normalisation.
        owner (str): Class name, for error messages.

    Returns:
        tuple[int, ...]: The resolved elliptical layer indices.
    """
    elliptical_layers = check_elliptical_layers(elliptical_layers,
                                                len(layers), owner)
    if isinstance(eps, (np.floating, np.integer)):  # e.g. np.float32
        eps = float(eps)
    check_estimator_args(reduction, eps, owner=f'{owner}: ')
    for i, layer in enumerate(layers):
        layer.attn = EllipticalAttention.from_mmcv(
            layer.attn,
            elliptical=i in elliptical_layers,
            reduction=reduction,
            eps=eps)
    return elliptical_layers


def forward_layer(layer, x: Tensor,
                  v_prev: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """mmseg's ``TransformerEncoderLayer.forward`` with values threaded.

    Args:
        layer (TransformerEncoderLayer): A layer converted by
            :func:`make_elliptical`.
        x (Tensor): Tokens ``[B, N, C]``.
        v_prev (Tensor, optional): The previous layer's values.

    Returns:
        tuple[Tensor, Tensor]: Output tokens and this layer's values.
    """

    def inner(x: Tensor, v_prev: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        x, v = layer.attn(layer.norm1(x), identity=x, v_prev=v_prev)
        return layer.ffn(layer.norm2(x), identity=x), v

    if layer.with_cp and x.requires_grad:
        return cp.checkpoint(inner, x, v_prev, use_reentrant=False)
    return inner(x, v_prev)
