"""What every elliptical backbone and head shares.

An elliptical backbone (or head) is the mmseg class with
:class:`EllipticalTransformerMixin` mixed in before it: ``__init__`` builds
mmseg's model, then :func:`chain_stages` converts the layers that
:meth:`EllipticalTransformerMixin.layer_stages` returns and chains their
values, per stage. A subclass declares ``layer_stages`` and, for the
analysis tools, ``token_layout`` (:class:`TokenLayout`: how its tokens lie
on the image; nothing in the forward reads it).
"""
from dataclasses import dataclass
from operator import itemgetter
from typing import (Any, Callable, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import torch.nn as nn

from .chain import ValueChain
from .checks import (check_elliptical_layers, check_estimator_args,
                     check_finite_mode, check_images, check_kwargs)
from .conversion import to_elliptical

#: The parts of a segmentor that can be elliptical.
PARTS = ('backbone', 'decode_head')


class GridSource(NamedTuple):
    """Where the analysis reads the ``(h, w)`` token grid of a stage.

    Attributes:
        module (nn.Module): A module called (``module(...)``, so that its
            forward hooks run) once per forward of the model part.
        read (callable): Maps that module's forward output to ``(h, w)``.
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
    """How the tokens of one stage's layers lie on the image.

    Declared per stage by :meth:`EllipticalTransformerMixin.token_layout`
    for the analysis (``mmseg_elliptical.analysis``: representation
    collapse, attention maps); the forward never reads it. The default,
    ``TokenLayout()``, describes tokens that are no image grid (e.g. the
    queries of a Mask2Former decoder): collapse is measured over all of them
    and attention maps do not apply. The layers' output tokens are
    ``[B, prefix + h * w + suffix, C]`` (grid tokens row-major).

    Attributes:
        grid (str or GridSource, optional): Where the analysis finds the
            stage's ``(h, w)`` grid per forward: ``'argument'``, the layers'
            own ``hw_shape`` argument (the second positional one, as in
            mmseg's MiT, Twins and Swin layers); a :class:`GridSource`;
            ``'backbone'``: the tokens are a feature map of the backbone (a
            decode head's), the grid and stride are those of the backbone
            stage with as many grid tokens; or None (default): the tokens
            are no image grid.
        stride (tuple[int, int], optional): Input pixels per grid token
            (rows, columns): token ``(r, c)`` stands for input pixels
            ``[r * sh, (r + 1) * sh) x [c * sw, (c + 1) * sw)``. Needed with
            ``'argument'`` and :class:`GridSource` grids.
        prefix (int): Leading tokens that are no grid cells (cls token).
        suffix (int): Trailing tokens that are no grid cells (Segmenter's
            class embeddings).
        keys (str): Where the attention's keys lie: ``'tokens'`` (the
            layer's own tokens, prefix, grid and suffix: global attention),
            ``'reduced'`` (the grid reduced by a strided ``reduction`` x
            ``reduction`` convolution: ``h // r`` x ``w // r`` keys,
            row-major; MiT, Twins), ``'windows'`` (the query's window:
            probabilities ``[B * windows, H, T, T]``, and the layer's
            attention gives each grid token's slot ``window * T + position``
            by ``image_slots(hw_shape, device)`` and the windows per side by
            ``window_grid(hw_shape)``; Swin).
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
    """The token layouts of the reduced-attention backbones (MiT, Twins-PCPVT):
    per stage, the grid is the layers' ``hw_shape`` argument and the keys
    are that grid reduced by the attention's ``sr_ratio``.

    Args:
        steps (Sequence[Sequence[int]]): The strides ``(sh, sw)`` of the
            module that starts each stage (its patch embedding).
        reductions (Sequence[int]): The ``sr_ratio`` of each stage.

    Returns:
        list[TokenLayout]: One per stage.
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

    def token_layout(self) -> List[TokenLayout]:
        """How each stage's tokens lie on the image, one entry per stage of
        :meth:`layer_stages` (for the analysis only). Default: tokens that
        are no image grid."""
        return [TokenLayout() for _ in self.layer_stages()]

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
