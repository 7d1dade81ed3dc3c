"""What every elliptical backbone and head shares: the mmseg class with
:class:`EllipticalTransformerMixin` mixed in before it."""
from dataclasses import dataclass
from operator import itemgetter
from typing import (Any, Callable, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import torch.nn as nn

from ..utils.choices import PARTS  # noqa: F401 (the tools' --part)
from .chain import ValueChain
from .checks import (check_elliptical_layers, check_estimator_args,
                     check_finite_mode, check_images, check_kwargs)
from .conversion import to_elliptical


class GridSource(NamedTuple):
    """Where the analysis reads the ``(h, w)`` token grid of a stage.

    Attributes:
        module (nn.Module): Called once per forward of the model part.
        read (callable): Maps its forward output to ``(h, w)``.
    """
    module: nn.Module
    read: Callable[[Any], Sequence[int]]

    def __repr__(self) -> str:
        return f'GridSource({type(self.module).__name__})'


def patch_grid(patch_embed: nn.Module) -> GridSource:
    """The grid of mmseg's ``PatchEmbed``, whose output is ``(x, hw)``."""
    return GridSource(patch_embed, itemgetter(1))


@dataclass(frozen=True)
class TokenLayout:
    """How the tokens ``[B, prefix + h * w + suffix, C]`` of one stage lie
    on the image, for the analysis only (docs/evidence.md).

    Attributes:
        grid (str or GridSource, optional): ``'argument'`` (the layers'
            ``hw_shape``), a :class:`GridSource`, ``'backbone'`` or None (no
            image grid).
        stride (tuple[int, int], optional): Input pixels per grid token.
        prefix (int): Leading tokens that are no grid cells.
        suffix (int): Trailing tokens that are no grid cells.
        keys (str): ``'tokens'``, ``'reduced'`` or ``'windows'``.
        reduction (int): The reduction of ``'reduced'`` keys.
    """
    grid: Union[str, GridSource, None] = None
    stride: Optional[Tuple[int, int]] = None
    prefix: int = 0
    suffix: int = 0
    keys: str = 'tokens'
    reduction: int = 1

    KEYS = ('tokens', 'reduced', 'windows')

    def __post_init__(self) -> None:
        if self.keys not in self.KEYS:
            raise ValueError(f'TokenLayout: keys={self.keys!r} must be one '
                             f'of {self.KEYS}.')
        if isinstance(self.grid,
                      str) and self.grid not in ('argument', 'backbone'):
            raise ValueError(f'TokenLayout: grid={self.grid!r} must be '
                             '"argument", "backbone", a GridSource or None.')


def stage_strides(steps: Sequence[Sequence[int]]) -> List[Tuple[int, int]]:
    """Input pixels per token of each stage, from the strides ``(sh, sw)`` of
    the modules that start the stages (patch embeddings, patch merging)."""
    out, rows, cols = [], 1, 1
    for sh, sw in steps:
        rows, cols = rows * sh, cols * sw
        out.append((rows, cols))
    return out


def reduced_token_layouts(steps: Sequence[Sequence[int]],
                          reductions: Sequence[int]) -> List[TokenLayout]:
    """The token layouts of MiT and Twins-PCPVT, one per stage.

    Args:
        steps (Sequence[Sequence[int]]): The stride ``(sh, sw)`` of each
            stage's patch embedding.
        reductions (Sequence[int]): The ``sr_ratio`` of each stage.
    """
    return [
        TokenLayout(
            grid='argument', stride=stride, keys='reduced', reduction=ratio)
        for stride, ratio in zip(stage_strides(steps), reductions)
    ]


def chain_stages(stages: Sequence[Sequence[nn.Module]],
                 elliptical_layers: Optional[Sequence[int]],
                 relevance_reduction: str, relevance_eps: float,
                 owner: str) -> Tuple[int, ...]:
    """Convert mmseg transformer layers and chain their values, per stage.

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

    Args:
        elliptical_layers (Sequence[int], optional): Global indices (0-based,
            forward order across stages) of the layers that score
            elliptically. Defaults to every layer but the first of each
            stage; ``[]`` is mmseg's model.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'`` over
            tokens of ``|v^l - v^(l-1)|``.
        relevance_eps (float): Below this ``max_d m_d``, ``m`` is all ones.
        check_finite (str or bool): Reject NaN or infinite input: ``'cpu'``
            (inputs on the CPU), ``'always'`` (one host synchronisation per
            forward on GPUs) or ``'never'``.
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
        """Convert and chain the layers (the class's :attr:`OWN_ARGS`)."""
        owner = type(self).__name__
        self.check_finite = check_finite_mode(check_finite, owner)
        self.elliptical_layers = chain_stages(self.layer_stages(),
                                              elliptical_layers,
                                              relevance_reduction,
                                              relevance_eps, owner)
        self.in_channels_expected = self.input_channels()

    @classmethod
    def check_arguments(cls, kwargs: dict) -> None:
        """Reject keyword arguments that mmseg's class does not take."""
        check_kwargs(cls, cls.mmseg_class(), kwargs, cls.OWN_ARGS)

    @classmethod
    def mmseg_class(cls) -> type:
        """The mmseg class this one makes elliptical."""
        mro = cls.__mro__
        return mro[mro.index(EllipticalTransformerMixin) + 1]

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        """The transformer layers of each stage, in forward order."""
        raise NotImplementedError

    def token_layout(self) -> List[TokenLayout]:
        """One :class:`TokenLayout` per stage (default: no image grid)."""
        return [TokenLayout() for _ in self.layer_stages()]

    def input_channels(self) -> Optional[int]:
        """The first convolution's input channels, or None."""
        conv = next((m for m in self.modules() if isinstance(m, nn.Conv2d)),
                    None)
        return None if conv is None else conv.in_channels

    def check_inputs(self, inputs) -> None:
        """Raise a clear error for input mmseg's forward would choke on."""
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
