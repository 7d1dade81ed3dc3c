"""Argument and input checks of the elliptical models, run at build time
but for :func:`check_images`."""
from collections.abc import Iterable, Mapping
from numbers import Integral, Real
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError  # noqa: F401
from ..errors import ConfigError, UnknownArgumentError  # noqa: F401
from ..utils.keywords import init_keywords, unknown_keyword_error

REDUCTIONS = ('mean', 'median')
CHECK_FINITE = ('cpu', 'always', 'never')


def check_estimator_args(reduction: str, eps: float, owner: str = '') -> float:
    """Validate the estimator options and return ``eps`` as a float.

    Args:
        reduction (str): One of :data:`REDUCTIONS`.
        eps (float): A finite number > 0.
        owner (str): Prefix of the message.

    Raises:
        ConfigError: Naming the bad option.
    """
    if reduction not in REDUCTIONS:
        raise ConfigError(f'{owner}relevance_reduction={reduction!r} is not '
                          f'supported; choose one of {REDUCTIONS}.')
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, Real) \
            or not 0 < eps < float('inf'):
        raise ConfigError(f'{owner}relevance_eps={eps!r} must be a finite '
                          'number > 0 (e.g. 1e-6).')
    return float(eps)


def check_finite_mode(value: Union[bool, str], owner: str) -> str:
    """Resolve ``check_finite`` (``True``: ``'always'``, ``False``:
    ``'never'``) to one of :data:`CHECK_FINITE`."""
    if value is True or value is False:
        return 'always' if value else 'never'
    if value not in CHECK_FINITE:
        raise ConfigError(f'{owner}: check_finite={value!r} must be one of '
                          f'{CHECK_FINITE} (or True / False).')
    return value


def check_elliptical_layers(elliptical_layers: Optional[Sequence[int]],
                            stage_depths: Sequence[int],
                            owner: str) -> Tuple[int, ...]:
    """Validate ``elliptical_layers`` and resolve the default (None).

    Args:
        elliptical_layers (Sequence[int], optional): Global layer indices.
        stage_depths (Sequence[int]): Number of layers of each stage.
        owner (str): Class name, for the message.

    Returns:
        tuple[int, ...]: Sorted layer indices.
    """
    starts = np.cumsum([0, *stage_depths[:-1]]).tolist()
    total = int(sum(stage_depths))
    allowed = [i for i in range(total) if i not in starts]
    if len(stage_depths) == 1:
        valid = (f'distinct integers in 1..{total - 1}' if total > 1 else
                 'an empty list (a single layer has no previous values)')
        first = 'layer 0 has no previous layer\'s values and stays dot-product'
    else:
        valid = f'distinct integers among {allowed}'
        first = (f'the first layer of each stage ({starts}) has no previous '
                 'layer\'s values in its stage and stays dot-product')
    if elliptical_layers is None:
        return tuple(allowed)
    if not isinstance(elliptical_layers, Iterable) or isinstance(
            elliptical_layers, (str, bytes, Mapping)):
        raise ConfigError(f'{owner}: elliptical_layers={elliptical_layers!r} '
                          f'must be a list of {valid}.')
    items = tuple(elliptical_layers)  # also a generator, read once
    if not all(
            isinstance(i, Integral) and not isinstance(i, (bool, np.bool_))
            for i in items):
        raise ConfigError(f'{owner}: elliptical_layers={elliptical_layers!r} '
                          f'must be a list of {valid}, not of '
                          f'{sorted({type(i).__name__ for i in items})}.')
    layers = [int(i) for i in items]  # numpy integers become ints
    bad = [i for i in layers if i not in allowed]
    if bad:
        reason = f'{first}; ' if set(bad) & set(starts) else ''
        raise ConfigError(f'{owner}: elliptical_layers={layers!r} contains '
                          f'{bad}: {reason}valid are {valid}.')
    if len(set(layers)) != len(layers):
        raise ConfigError(f'{owner}: elliptical_layers={layers!r} has '
                          f'duplicates; valid are {valid}.')
    return tuple(sorted(layers))


def check_images(inputs: Tensor,
                 owner: str,
                 channels: Optional[int] = None,
                 check_finite: str = 'cpu') -> None:
    """Reject input mmseg's forward would choke on, naming the problem.

    Only the non-finite check reads values (see :func:`looks_at_values`).

    Args:
        inputs (Tensor): The backbone's input.
        owner (str): Class name, for the message.
        channels (int, optional): The channels the model expects.
        check_finite (str): One of :data:`CHECK_FINITE`.
    """
    if not isinstance(inputs, Tensor) or inputs.dim() != 4 \
            or not inputs.is_floating_point():
        shape = tuple(getattr(inputs, 'shape', ()))
        raise InputError(
            f'{owner} expects a float batch of images [B, C, H, W], got shape '
            f'{shape} and dtype {getattr(inputs, "dtype", type(inputs))} '
            '(images are normalised to float by the data preprocessor).')
    if channels is not None and inputs.shape[1] != channels:
        raise InputError(
            f'{owner}: in_channels={channels} but the images have '
            f'{inputs.shape[1]} channel(s) (shape {tuple(inputs.shape)}); '
            'load them with that many channels (e.g. LoadImageFromFile('
            "color_type='color') for RGB) or set backbone.in_channels="
            f'{inputs.shape[1]}.')
    if not looks_at_values(inputs, check_finite):
        return
    bad = count_non_finite(inputs)
    if bad:
        raise InputError(
            f'{owner}: the input contains {bad} NaN or infinite values '
            f'(shape {tuple(inputs.shape)}); check the images and the '
            'data preprocessor (mean/std), or set '
            "backbone.check_finite='never' to skip this check.")


def count_non_finite(x: Tensor) -> int:
    """How many elements of ``x`` are NaN or infinite (one sum first)."""
    if bool(x.sum().isfinite()):
        return 0
    return x.numel() - int(torch.isfinite(x).sum())


def looks_at_values(x: Tensor, check_finite: str) -> bool:
    """Whether the non-finite check reads ``x``: not under
    ``torch.compile``, on a GPU only with ``'always'`` (a host sync)."""
    if check_finite == 'never' or torch.compiler.is_compiling():
        return False
    return check_finite == 'always' or x.device.type == 'cpu'


def check_kwargs(cls: type, parent: type, kwargs: dict,
                 own: Sequence[str]) -> None:
    """Reject keyword arguments neither ``cls`` nor ``parent`` accepts
    (else Python's ``TypeError`` names mmseg's class).

    Args:
        cls (type): The plugin class, for the message.
        parent (type): The mmseg class whose ``__init__`` gets ``kwargs``.
        kwargs (dict): The keyword arguments passed on to ``parent``.
        own (Sequence[str]): The plugin class's own argument names.

    Raises:
        UnknownArgumentError: With the closest valid name.
    """
    names, closed = init_keywords(parent)
    if not closed:
        return  # **kwargs all the way up: nothing to check against
    valid = list(own) + names
    for name in kwargs:
        if name not in valid:
            raise unknown_keyword_error(cls.__name__, name, valid)
