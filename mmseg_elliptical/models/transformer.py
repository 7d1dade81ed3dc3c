"""What every elliptical backbone and head shares.

An elliptical backbone (or head) is the mmseg class with
:class:`EllipticalTransformerMixin` mixed in before it: ``__init__`` builds
mmseg's model, then :func:`chain_stages` converts the layers that
:meth:`EllipticalTransformerMixin.layer_stages` returns and chains their
values, per stage. A subclass declares only ``layer_stages``.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch.nn as nn

from .chain import ValueChain
from .checks import (check_elliptical_layers, check_estimator_args,
                     check_finite_mode, check_images, check_kwargs)
from .conversion import to_elliptical


def chain_stages(stages: Sequence[Sequence[nn.Module]],
                 elliptical_layers: Optional[Sequence[int]],
                 relevance_reduction: str, relevance_eps: float,
                 owner: str) -> Tuple[int, ...]:
    """Convert mmseg transformer layers and chain their values, per stage.

    Every layer and its attention become elliptical (so each hands its values
    on); those in ``elliptical_layers`` score elliptically, the others keep
    dot-product scores. The arguments are validated first.

    Args:
        stages (Sequence[Sequence[nn.Module]]): The layers of each stage, in
            forward order; the chain restarts at each stage.
        elliptical_layers (Sequence[int], optional): See
            :func:`~.checks.check_elliptical_layers`.
        relevance_reduction (str): ``'mean'`` or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation.
        owner (str): Class name, for error messages.

    Returns:
        tuple[int, ...]: The resolved elliptical layer indices.
    """
    resolved = check_elliptical_layers(elliptical_layers,
                                       [len(s) for s in stages], owner)
    relevance_eps = check_estimator_args(
        relevance_reduction, relevance_eps, owner=f'{owner}: ')
    index = 0
    for stage in stages:
        for layer in stage:
            to_elliptical(layer)
            to_elliptical(
                layer.chained_attention,
                elliptical=index in resolved,
                relevance_reduction=relevance_reduction,
                relevance_eps=relevance_eps)
            index += 1
        chain = ValueChain([layer.chained_attention for layer in stage])
        for j, layer in enumerate(stage):
            layer.value_chain, layer.chain_index = chain, j
    return resolved


class EllipticalTransformerMixin:
    """The elliptical version of an mmseg transformer backbone or head.

    Mixed in before the mmseg class. A built mmseg model converts in place
    with ``to_elliptical(model.backbone, elliptical_layers=...)``, which
    calls :meth:`init_elliptical` with these options.

    Args:
        elliptical_layers (Sequence[int], optional): Global indices (0-based,
            in forward order across stages) of the layers that score
            elliptically. Defaults to None: every layer but the first of each
            stage. ``[]``: mmseg's model exactly.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'`` over
            tokens of ``|v^l - v^(l-1)|``. Defaults to ``'mean'``.
        relevance_eps (float): Below this ``max_d m_d``, ``m`` falls back to
            all ones (dot-product). Defaults to 1e-6.
        check_finite (str or bool): Raise a clear error when the input holds
            NaN or infinite values: ``'cpu'`` (default) for inputs on the
            CPU, ``'always'`` (``True``) also on GPUs, at the cost of one host
            synchronisation per forward, ``'never'`` (``False``).
        **kwargs: Arguments of the mmseg class.
    """
    OWN_ARGS = ('elliptical_layers', 'relevance_reduction', 'relevance_eps',
                'check_finite')

    def __init__(self,
                 elliptical_layers: Optional[Sequence[int]] = None,
                 relevance_reduction: str = 'mean',
                 relevance_eps: float = 1e-6,
                 check_finite: Union[str, bool] = 'cpu',
                 **kwargs) -> None:
        self.check_arguments(kwargs)
        super().__init__(**kwargs)
        self.init_elliptical(elliptical_layers, relevance_reduction,
                             relevance_eps, check_finite)

    def init_elliptical(self,
                        elliptical_layers: Optional[Sequence[int]] = None,
                        relevance_reduction: str = 'mean',
                        relevance_eps: float = 1e-6,
                        check_finite: Union[str, bool] = 'cpu') -> None:
        """Convert and chain the layers; takes the class's own arguments
        (:attr:`OWN_ARGS`), as every ``init_elliptical`` does."""
        owner = type(self).__name__
        self.check_finite = check_finite_mode(check_finite, owner)
        self.elliptical_layers = chain_stages(self.layer_stages(),
                                              elliptical_layers,
                                              relevance_reduction,
                                              relevance_eps, owner)
        self.in_channels_expected = self.input_channels()

    @classmethod
    def check_arguments(cls, kwargs: dict) -> None:
        """Reject keyword arguments for mmseg's class that it does not take
        (:func:`~.checks.check_kwargs`), before building it."""
        check_kwargs(cls, cls.mmseg_class(), kwargs, cls.OWN_ARGS)

    @classmethod
    def mmseg_class(cls) -> type:
        """The mmseg class this one makes elliptical."""
        mro = cls.__mro__
        return mro[mro.index(EllipticalTransformerMixin) + 1]

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        """The transformer layers of each stage, in forward order."""
        raise NotImplementedError

    def input_channels(self) -> Optional[int]:
        """The channels of the input (the first convolution's), found once
        at build time; None when there is no convolution."""
        conv = next((m for m in self.modules() if isinstance(m, nn.Conv2d)),
                    None)
        return None if conv is None else conv.in_channels

    def check_inputs(self, inputs) -> None:
        """Raise a clear error for input mmseg's forward would choke on
        (metadata only, but for :func:`~.checks.check_images`' non-finite
        check)."""
        check_images(inputs,
                     type(self).__name__, self.in_channels_expected,
                     self.check_finite)

    def forward(self, inputs, *args, **kwargs):
        self.check_inputs(inputs)
        return super().forward(inputs, *args, **kwargs)

    def train(self, mode: bool = True) -> nn.Module:
        """Set train/eval mode (honouring ``norm_eval``) and return self."""
        super().train(mode)  # some mmseg backbones return None
        return self
