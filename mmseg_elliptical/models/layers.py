"""Make mmseg transformer layers elliptical in place and chain their values.

The previous layer's values reach each attention through a
:class:`ValueChain` shared by the layers of one chain (a ViT, one stage of a
hierarchical backbone, the Segmenter head). Each converted layer's ``forward``
(:class:`EllipticalLayerMixin`) takes the previous values from the chain
before running mmseg's own ``forward`` and hands its attention's values on
after it, so no backbone or layer ``forward`` of mmseg is copied.

Gradient checkpointing (``with_cp``) is done by the mixin, with the previous
values as an explicit input of the checkpointed function: a recomputation in
the backward sees the values of its own forward, also when several forwards
run before one backward (gradient accumulation).

Modules are converted in place by :func:`.conversion.to_elliptical`.
"""
import difflib
import inspect
from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .attention.core import ChainCall, check_estimator_args
from .conversion import to_elliptical


class ValueChain:
    """Hands each layer's attention values to the next layer, per forward.

    Values are kept only where the next layer scores elliptically, and each is
    dropped as soon as it is read. The first layer of the chain clears what a
    failed forward may have left.

    Args:
        attentions (Sequence[nn.Module]): The chain's elliptical attentions,
            in forward order (their ``elliptical`` flags are read live).
    """

    def __init__(self, attentions: Sequence[nn.Module]) -> None:
        self.attentions = list(attentions)
        self.values: List[Optional[Tensor]] = [None] * len(self.attentions)

    def __len__(self) -> int:
        return len(self.attentions)

    def keeps(self, index: int) -> bool:
        """Whether the layer after ``index`` reads ``index``'s values."""
        return index + 1 < len(self) and self.attentions[index + 1].elliptical

    def take(self, index: int) -> Optional[Tensor]:
        """The values layer ``index`` scores with (None: dot-product)."""
        if index == 0:
            self.values = [None] * len(self)
            return None
        if not self.attentions[index].elliptical:
            return None
        v_prev, self.values[index - 1] = self.values[index - 1], None
        if v_prev is None:
            raise RuntimeError(
                f'Layer {index} of this chain scores elliptically with the '
                f'values of layer {index - 1} from the same forward, but '
                f'layer {index - 1} has not run since layer 0; run the '
                'layers in order through the backbone\'s forward.')
        return v_prev

    def put(self, index: int, values: Optional[Tensor]) -> None:
        """Keep layer ``index``'s values if the next layer reads them."""
        if self.keeps(index):
            self.values[index] = values


class EllipticalLayerMixin:
    """Runs an mmseg transformer layer inside a :class:`ValueChain`.

    Mixed in before the mmseg layer class; the layer's attention (``attn``)
    must be elliptical. Outside a chain (``value_chain`` None) the layer is
    mmseg's, with dot-product scores.
    """
    value_chain: Optional[ValueChain] = None
    chain_index: int = 0

    def forward(self, x: Tensor, *args, **kwargs):
        chain = self.value_chain
        if chain is None:
            return super().forward(x, *args, **kwargs)
        index = self.chain_index
        keep = chain.keeps(index)
        if getattr(self, 'with_cp', False) and x.requires_grad:
            out, values = checkpoint(
                self._checkpointed, x, chain.take(index), keep, *args,
                use_reentrant=False, **kwargs)
        else:
            # Only the call holds the previous values (not an argument
            # tuple), so that the attention drops them once read instead of
            # keeping them through the MLP. mmseg's layers checkpoint only
            # when x requires grad, so none does here.
            call = self.attn.begin_call(chain.take(index), keep, owned=True)
            out, values = self._forward_in_call(call, x, *args, **kwargs)
        chain.put(index, values)
        return out

    def _checkpointed(self, x: Tensor, v_prev: Optional[Tensor], keep: bool,
                      *args, **kwargs):
        # The previous values are an input of the checkpointed function, so
        # a recomputation in the backward sees those of its own forward.
        # mmseg's own checkpoint is off inside; try/finally rather than
        # context managers: torch.compile traces it.
        call = self.attn.begin_call(v_prev, keep)
        self.with_cp = False
        try:
            return self._forward_in_call(call, x, *args, **kwargs)
        finally:
            self.with_cp = True

    def _forward_in_call(self, call: ChainCall, x: Tensor, *args, **kwargs):
        # mmseg's forward inside the attention's chain call.
        try:
            out = super().forward(x, *args, **kwargs)
        finally:
            self.attn.end_call()
        return out, call.values


def check_elliptical_layers(elliptical_layers: Optional[Sequence[int]],
                            stage_depths: Sequence[int],
                            owner: str) -> Tuple[int, ...]:
    """Validate ``elliptical_layers`` and resolve the default.

    Args:
        elliptical_layers (Sequence[int], optional): Global indices (0-based,
            in forward order across stages) of the layers that score
            elliptically; None means every layer but the first of each stage.
        stage_depths (Sequence[int]): Number of layers of each stage.
        owner (str): Class name, for the error message.

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
    bad = [i for i in layers if i not in allowed]
    if bad:
        reason = f'{first}; ' if set(bad) & set(starts) else ''
        raise ValueError(f'{owner}: elliptical_layers={layers!r} contains '
                         f'{bad}: {reason}valid are {valid}.')
    if len(set(layers)) != len(layers):
        raise ValueError(f'{owner}: elliptical_layers={layers!r} has '
                         f'duplicates; valid are {valid}.')
    return tuple(sorted(layers))


def make_elliptical(stages: Sequence[Sequence[nn.Module]],
                    elliptical_layers: Optional[Sequence[int]],
                    reduction: str, eps: float, owner: str) -> Tuple[int, ...]:
    """Convert mmseg transformer layers and chain their values, per stage.

    Every layer and its attention (``layer.attn``) become elliptical (so each
    hands its values on); those in ``elliptical_layers`` score elliptically,
    the others keep dot-product scores. The arguments are validated first.

    Args:
        stages (Sequence[Sequence[nn.Module]]): The layers of each stage, in
            forward order; the chain restarts at each stage.
        elliptical_layers (Sequence[int], optional): See
            :func:`check_elliptical_layers`.
        reduction (str): Estimator reduction, ``'mean'`` or ``'median'``.
        eps (float): Guard of the max-normalisation.
        owner (str): Class name, for error messages.

    Returns:
        tuple[int, ...]: The resolved elliptical layer indices.
    """
    resolved = check_elliptical_layers(elliptical_layers,
                                       [len(s) for s in stages], owner)
    eps = check_estimator_args(reduction, eps, owner=f'{owner}: ')
    index = 0
    for stage in stages:
        for layer in stage:
            to_elliptical(layer)
            to_elliptical(
                layer.attn,
                elliptical=index in resolved,
                reduction=reduction,
                eps=eps)
            index += 1
        chain = ValueChain([layer.attn for layer in stage])
        for j, layer in enumerate(stage):
            layer.value_chain, layer.chain_index = chain, j
    return resolved


def check_images(inputs: Tensor, owner: str, channels: Optional[int] = None,
                 finite: bool = True) -> None:
    """Reject input mmseg's forward would choke on, naming the problem.

    Args:
        inputs (Tensor): The backbone's input.
        owner (str): Class name, for the message.
        channels (int, optional): The channels the model expects.
        finite (bool): Also reject NaN and infinite values (skipped under
            ``torch.compile``, where the check would break the graph).
    """
    if not isinstance(inputs, Tensor) or inputs.dim() != 4 \
            or not inputs.is_floating_point():
        shape = tuple(getattr(inputs, 'shape', ()))
        raise ValueError(
            f'{owner} expects a float batch of images [B, C, H, W], got shape '
            f'{shape} and dtype {getattr(inputs, "dtype", type(inputs))} '
            '(images are normalised to float by the data preprocessor).')
    if channels is not None and inputs.shape[1] != channels:
        raise ValueError(
            f'{owner}: in_channels={channels} but the images have '
            f'{inputs.shape[1]} channel(s) (shape {tuple(inputs.shape)}); '
            'load them with that many channels (e.g. LoadImageFromFile('
            "color_type='color') for RGB) or set backbone.in_channels="
            f'{inputs.shape[1]}.')
    if finite and not torch.compiler.is_compiling():
        bad = inputs.numel() - int(torch.isfinite(inputs).sum())
        if bad:
            raise ValueError(
                f'{owner}: the input contains {bad} NaN or infinite values '
                f'(shape {tuple(inputs.shape)}); check the images and the '
                'data preprocessor (mean/std), or set '
                'backbone.check_finite=False to skip this check.')


def check_kwargs(cls: type, parent: type, kwargs: dict,
                 own: Sequence[str]) -> None:
    """Reject keyword arguments neither ``cls`` nor ``parent`` accepts.

    Without this, a misspelt keyword reaches ``parent.__init__`` and Python's
    ``TypeError`` names mmseg's class instead of the plugin's.

    Args:
        cls (type): The plugin class, for the message.
        parent (type): The mmseg class whose ``__init__`` gets ``kwargs``.
        kwargs (dict): The keyword arguments passed on to ``parent``.
        own (Sequence[str]): The plugin class's own argument names.
    """
    valid = list(own)
    for klass in parent.__mro__:  # follow **kwargs up to the class using them
        if '__init__' not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        valid += [n for n, p in params.items() if n != 'self' and p.kind in (
            p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    else:
        return  # **kwargs all the way up: nothing to check against
    for name in kwargs:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else (
                f'; valid are {sorted(set(valid))}.')
            raise TypeError(f'{cls.__name__} got an unexpected keyword '
                            f'argument {name!r}{hint}')


class EllipticalTransformerMixin:
    """The elliptical version of an mmseg transformer backbone or head.

    Mixed in before the mmseg class: its ``__init__`` builds mmseg's model,
    then converts the layers that :meth:`layer_stages` returns
    (:func:`make_elliptical`); ``forward`` validates the input, then runs
    mmseg's ``forward``. A built mmseg model converts in place with
    ``to_elliptical(model.backbone, elliptical_layers=...)``.

    Args:
        elliptical_layers (Sequence[int], optional): Global indices (0-based,
            in forward order across stages) of the layers that score
            elliptically. Defaults to None: every layer but the first of each
            stage. ``[]``: mmseg's model exactly.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'`` over
            tokens of ``|v^l - v^(l-1)|``. Defaults to ``'mean'``.
        relevance_eps (float): Below this ``max_d m_d``, ``m`` falls back to
            all ones (dot-product). Defaults to 1e-6.
        check_finite (bool): Raise a clear error when the input holds NaN or
            infinite values (one pass over the input; on a GPU one host
            synchronisation per forward). Defaults to True.
        **kwargs: Arguments of the mmseg class.
    """
    OWN_ARGS = ('elliptical_layers', 'relevance_reduction', 'relevance_eps',
                'check_finite')

    def __init__(self,
                 elliptical_layers: Optional[Sequence[int]] = None,
                 relevance_reduction: str = 'mean',
                 relevance_eps: float = 1e-6,
                 check_finite: bool = True,
                 **kwargs) -> None:
        check_kwargs(type(self), self.mmseg_class(), kwargs, self.OWN_ARGS)
        super().__init__(**kwargs)
        self.check_finite = bool(check_finite)
        self.init_elliptical(elliptical_layers, relevance_reduction,
                             relevance_eps)

    def init_elliptical(self,
                        elliptical_layers: Optional[Sequence[int]] = None,
                        relevance_reduction: str = 'mean',
                        relevance_eps: float = 1e-6) -> None:
        """Convert the layers (also after an in-place conversion of mmseg's
        model by :func:`~mmseg_elliptical.models.to_elliptical`)."""
        self.elliptical_layers = make_elliptical(
            self.layer_stages(), elliptical_layers, relevance_reduction,
            relevance_eps, type(self).__name__)

    @classmethod
    def mmseg_class(cls) -> type:
        """The mmseg class this one makes elliptical."""
        mro = cls.__mro__
        return mro[mro.index(EllipticalTransformerMixin) + 1]

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        """The transformer layers of each stage, in forward order."""
        raise NotImplementedError

    def check_inputs(self, inputs) -> None:
        """Raise a clear error for input mmseg's forward would choke on."""
        conv = next(m for m in self.modules() if isinstance(m, nn.Conv2d))
        check_images(inputs, type(self).__name__, conv.in_channels,
                     getattr(self, 'check_finite', True))

    def forward(self, inputs, *args, **kwargs):
        self.check_inputs(inputs)
        return super().forward(inputs, *args, **kwargs)

    def train(self, mode: bool = True) -> nn.Module:
        """Set train/eval mode (honouring ``norm_eval``) and return self."""
        super().train(mode)  # some mmseg backbones return None
        return self
