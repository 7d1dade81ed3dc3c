"""Elliptical versions of mmcv's ``MultiheadAttention`` (ViT, Segmenter,
the query self-attention of mmdet's decoders) and of the spatial-reduction
attentions of MiT and Twins."""
from typing import Optional, Sequence

import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmseg.models.backbones.mit import EfficientMultiheadAttention
from mmseg.models.backbones.twins import GlobalSubsampledAttention
from mmseg.models.utils import nchw_to_nlc, nlc_to_nchw
from mmseg.registry import MODELS
from torch import Tensor

from ..conversion import ConversionError, register_elliptical_version
from .core import EllipticalAttentionMixin
from .utils import split_heads


@MODELS.register_module()
@register_elliptical_version(MultiheadAttention)
class EllipticalAttention(EllipticalAttentionMixin, MultiheadAttention):
    """mmcv's ``MultiheadAttention`` (self-attention) with elliptical scores.

    Args:
        *args: Arguments of mmcv's class; ``batch_first`` must be True.
        **kwargs: Keyword arguments of mmcv's class, plus those of
            :class:`~.core.EllipticalAttentionMixin`.
    """

    def __init__(self, *args, batch_first: bool = True, **kwargs) -> None:
        super().__init__(*args, batch_first=batch_first, **kwargs)
        self.check_convertible(self)

    @classmethod
    def check_convertible(cls, module: MultiheadAttention) -> None:
        """Raise :class:`ConversionError` for settings this class does not
        run."""
        name = type(module).__name__
        if not module.batch_first:
            raise ConversionError(
                f'{name}: elliptical attention supports '
                'batch_first=True only ([B, N, C] tokens, as '
                'mmseg\'s transformers use).')
        if not module.attn._qkv_same_embed_dim:
            raise ConversionError(
                f'{name}: elliptical attention needs the packed '
                'in_proj_weight (kdim = vdim = embed_dims).')
        if module.attn.bias_k is not None:
            raise ConversionError(f'{name}: add_bias_kv is not supported.')

    def forward(self,
                query: Tensor,
                key: Optional[Tensor] = None,
                value: Optional[Tensor] = None,
                identity: Optional[Tensor] = None,
                query_pos: Optional[Tensor] = None,
                key_pos: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                **kwargs) -> Tensor:
        """Self-attention over ``query`` plus the shortcut (mmcv's arguments).

        Args:
            query (Tensor): Tokens ``[B, N, C]``.
            key, value (Tensor, optional): None or ``query`` itself.
            identity (Tensor, optional): Shortcut; defaults to ``query``.
            query_pos (Tensor, optional): Added to the queries' input, not
                the values'.
            key_pos (Tensor, optional): Added to the keys' input; defaults
                to ``query_pos``.
            attn_mask, key_padding_mask: Must be None.

        Raises:
            TypeError: For cross-attention or masks.
        """
        unsupported = sorted(k for k, v in dict(
            kwargs, attn_mask=attn_mask,
            key_padding_mask=key_padding_mask).items() if v is not None)
        unsupported += [
            name for name, t in (('key', key), ('value', value))
            if t is not None and t is not query
        ]
        if unsupported:
            raise TypeError(
                f'{type(self).__name__} is self-attention only (as in '
                'mmseg\'s ViT and the query self-attention of mmdet\'s '
                f'decoders, without masks); got {unsupported}.')
        if identity is None:
            identity = query
        if key_pos is None:  # mmcv's default
            key_pos = query_pos
        x_q = query if query_pos is None else query + query_pos
        return self.attend_tokens(x_q, query if key_pos is not None else x_q,
                                  identity, key_pos)

    def attend_tokens(self,
                      x_q: Tensor,
                      x_kv: Tensor,
                      identity: Optional[Tensor],
                      key_pos: Optional[Tensor] = None) -> Tensor:
        """Queries from ``x_q`` attend to keys and values from ``x_kv``
        (``key_pos`` added to the keys' input)."""
        B, N, C = x_q.shape
        mha = self.attn
        q, k, v, m = self.project(x_q, x_kv, mha.in_proj_weight,
                                  mha.in_proj_bias)
        if key_pos is not None:  # (x + p) W_k + b = (x W_k + b) + p W_k
            w_k = mha.in_proj_weight[C:2 * C]
            k = k + split_heads(F.linear(key_pos, w_k), 1, self.num_heads)[0]
        out = self.attend(q, k, v, m, dropout_p=mha.dropout)
        out = mha.out_proj(out.transpose(1, 2).reshape(B, N, C))
        if identity is None:
            identity = x_q
        return identity + self.dropout_layer(self.proj_drop(out))


@MODELS.register_module()
@register_elliptical_version(EfficientMultiheadAttention)
class EllipticalEfficientMultiheadAttention(EllipticalAttention,
                                            EfficientMultiheadAttention):
    """MiT's spatial-reduction attention (SegFormer) with elliptical scores;
    ``m`` compares values over the reduced tokens."""

    def forward(self,
                x: Tensor,
                hw_shape: Sequence[int],
                identity: Optional[Tensor] = None) -> Tensor:
        """Attend from the tokens ``[B, N, C]`` of the ``hw_shape`` grid to
        the reduced tokens, plus the shortcut ``identity`` (default ``x``)."""
        x_kv = x
        if self.sr_ratio > 1:
            x_kv = self.norm(nchw_to_nlc(self.sr(nlc_to_nchw(x, hw_shape))))
        return self.attend_tokens(x, x_kv, identity)


@MODELS.register_module()
@register_elliptical_version(GlobalSubsampledAttention)
class EllipticalGlobalSubsampledAttention(
        EllipticalEfficientMultiheadAttention, GlobalSubsampledAttention):
    """Twins' global sub-sampled attention (MiT's, renamed) with elliptical
    scores."""
