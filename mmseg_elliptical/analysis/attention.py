"""Materialised attention probabilities of mmcv and elliptical attentions."""
from typing import Optional

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..models.elliptical_attention import EllipticalAttention


def attention_probs(attn: nn.Module,
                    x: Tensor,
                    v_prev: Optional[Tensor] = None) -> Tensor:
    """Attention probabilities ``[B, H, N, N]`` of a layer's attention.

    Args:
        attn (nn.Module): ``layer.attn``: an :class:`EllipticalAttention` or
            an mmcv ``MultiheadAttention`` (self-attention; its inner
            ``nn.MultiheadAttention`` holds ``in_proj_weight``).
        x (Tensor): The normalised tokens ``[B, N, C]`` the attention saw
            (``layer.norm1`` of the layer input).
        v_prev (Tensor, optional): Previous layer's values, for elliptical
            scoring; ignored by dot-product attention.

    Returns:
        Tensor: Softmax-normalised rows, without dropout; row ``i`` is where
        token ``i`` attends.
    """
    if isinstance(attn, EllipticalAttention):
        return attn.attention_weights(x, v_prev)
    mha = getattr(attn, 'attn', None)
    if not isinstance(mha, nn.MultiheadAttention) or \
            getattr(mha, 'in_proj_weight', None) is None:
        raise TypeError(
            f'attention_probs supports EllipticalAttention and mmcv '
            f'MultiheadAttention (self-attention with a packed in_proj_weight)'
            f', got {type(attn).__name__}.')
    B, N, C = x.shape
    heads = mha.num_heads
    q, k, _ = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, -1)
    q = q.reshape(B, N, heads, C // heads).transpose(1, 2)
    k = k.reshape(B, N, heads, C // heads).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1]**-0.5
    return scores.softmax(dim=-1)
