"""Elliptical version of Swin's shifted-window attention.

``m`` is estimated per image and head over the real tokens of the feature map
in image layout, so consecutive blocks compare the same positions whatever
their shifts; mmseg's windowing runs unchanged (docs/models.md).
"""
from functools import partial
from typing import Optional, Sequence, Tuple

import torch
from mmseg.models.backbones.swin import ShiftWindowMSA, WindowMSA
from mmseg.registry import MODELS
from torch import Tensor

from ..conversion import (ConversionError, qualname,
                          register_elliptical_version, to_elliptical)
from .core import EllipticalAttentionMixin
from .utils import relative_position_bias


@register_elliptical_version(WindowMSA)
class EllipticalWindowMSA(WindowMSA):
    """mmseg's ``WindowMSA`` whose forward its owner supplies per call
    (:meth:`EllipticalShiftWindowMSA.attend_windows`)."""
    window_call = None  # set by the owner for the duration of its forward

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if self.window_call is None:
            return super().forward(x, mask)
        return self.window_call(x, mask)

    def relative_position_bias(self) -> Tensor:
        """The relative position bias ``[H, Wt, Wt]``
        (:func:`~.utils.relative_position_bias`)."""
        return relative_position_bias(self.relative_position_bias_table,
                                      self.relative_position_index)


@MODELS.register_module()
@register_elliptical_version(ShiftWindowMSA)
class EllipticalShiftWindowMSA(EllipticalAttentionMixin, ShiftWindowMSA):
    """Swin's (shifted) window attention with elliptical scores.

    mmseg's ``ShiftWindowMSA`` arguments and parameters, plus
    :class:`~.utils.AttentionOptions`. The values it hands on are in image
    layout, ``[B, H, h * w, d]`` (docs/models.md).
    """

    @classmethod
    def check_convertible(cls, module: ShiftWindowMSA) -> None:
        """Raise :class:`ConversionError` unless ``module.w_msa`` is
        mmseg's class."""
        if type(module.w_msa) not in (WindowMSA, EllipticalWindowMSA):
            raise ConversionError(
                f'{type(module).__name__}.w_msa is a '
                f'{qualname(type(module.w_msa))}; elliptical Swin attention '
                'supports mmseg\'s WindowMSA exactly.')

    def init_elliptical(self, *args, **kwargs) -> None:
        """Set the elliptical options and convert ``w_msa``."""
        super().init_elliptical(*args, **kwargs)
        self.check_convertible(self)
        if type(self.w_msa) is WindowMSA:
            to_elliptical(self.w_msa)

    @property
    def num_heads(self) -> int:
        return self.w_msa.num_heads

    def forward(self, query: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """mmseg's forward, the windows attended by :meth:`attend_windows`.

        Args:
            query (Tensor): Tokens ``[B, h * w, C]``.
            hw_shape (Sequence[int]): ``(h, w)`` of the feature map.
        """
        self.w_msa.window_call = partial(
            self.attend_windows, hw_shape=tuple(hw_shape))
        try:
            return super().forward(query, hw_shape)
        finally:
            self.w_msa.window_call = None

    def window_partition(self, x: Tensor) -> Tensor:
        """mmseg's ``window_partition`` with the window count spelt out, so
        an exported graph's shapes stay products of the input size."""
        B, H, W, C = x.shape
        ws = self.window_size
        x = x.view(B, H // ws, ws, W // ws, ws, C)
        windows = x.permute(0, 1, 3, 2, 4, 5).contiguous()
        return windows.view(B * (H // ws) * (W // ws), ws, ws, C)

    def window_reverse(self, windows: Tensor, H: int, W: int) -> Tensor:
        """mmseg's ``window_reverse`` with the batch an integer division
        (mmseg's float one is fixed at the traced size by ``torch.export``)."""
        ws, C = self.window_size, windows.shape[-1]
        rows, cols = H // ws, W // ws
        x = windows.view(windows.shape[0] // (rows * cols), rows, cols, ws, ws,
                         C)
        x = x.permute(0, 1, 3, 2, 4, 5).contiguous()
        return x.view(x.shape[0], H, W, C)

    def window_grid(self, hw_shape: Sequence[int]) -> Tuple[int, int]:
        """Windows along the height and width of the padded feature map
        (non-negative operands: ONNX's ``Div`` truncates)."""
        ws = self.window_size
        h, w = ((s + (ws - s % ws) % ws) // ws for s in hw_shape)
        return h, w

    def image_slots(self, hw_shape: Sequence[int],
                    device: torch.device) -> Tensor:
        """Slot ``window * Wt + position`` of each of the ``h * w`` real
        tokens (row-major) among an image's padded, shifted windows."""
        h, w = hw_shape
        gh, gw = self.window_grid(hw_shape)
        ws, shift = self.window_size, self.shift_size
        padded = torch.arange(
            gh * ws * gw * ws, device=device).view(1, gh * ws, gw * ws, 1)
        if shift > 0:
            padded = padded.roll((-shift, -shift), dims=(1, 2))
        position = self.window_partition(padded).flatten()  # of each slot
        slot = torch.empty_like(position)
        slot[position] = torch.arange(position.numel(), device=device)
        return slot.view(gh * ws, gw * ws)[:h, :w].flatten()

    def to_image(self, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        """Window-layout values ``[B * nW, H, Wt, d]`` to ``[B, H, h * w, d]``
        (real tokens in image order, :meth:`chain_values`)."""
        rows, heads, T, d = v.shape
        gh, gw = self.window_grid(hw_shape)
        tokens = self.chain_values(v).transpose(1, 2).reshape(
            rows // (gh * gw), gh * gw * T, heads * d)
        tokens = tokens.index_select(1, self.image_slots(hw_shape, v.device))
        return tokens.view(*tokens.shape[:2], heads, d).transpose(1, 2)

    def attend_windows(self, x: Tensor, mask: Optional[Tensor],
                       hw_shape: Tuple[int, int]) -> Tensor:
        """``WindowMSA.forward`` with elliptical scores.

        Args:
            x (Tensor): Windows ``[B * nW, Wt, C]`` (mmseg's layout).
            mask (Tensor, optional): mmseg's shift mask ``[nW, Wt, Wt]``.
            hw_shape (tuple[int, int]): ``(h, w)`` of the feature map.
        """
        w_msa = self.w_msa
        rows, T, C = x.shape
        grid = self.window_grid(hw_shape)
        q, k, v, m = self.project(
            x,
            x,
            w_msa.qkv.weight,
            w_msa.qkv.bias,
            to_image=partial(self.to_image, hw_shape=hw_shape))
        if m is not None:  # m of each image in each of its nW windows
            m = m[:, None].expand(-1, grid[0] * grid[1], -1, -1, -1)
            m = m.reshape(-1, *m.shape[2:])
        bias = w_msa.relative_position_bias()[None]  # [1, H, Wt, Wt]
        out = self.attend_windows_of(q, k, v, m, bias, mask, grid)
        return w_msa.proj_drop(
            w_msa.proj(out.transpose(1, 2).reshape(rows, T, C)))

    def attend_windows_of(self, q: Tensor, k: Tensor, v: Tensor,
                          m: Optional[Tensor], bias: Tensor,
                          mask: Optional[Tensor], grid: Tuple[int,
                                                              int]) -> Tensor:
        """:meth:`attend` over the windows of each image of the batch.

        The fused path attends one window row per call: all rows but the
        last share one ``[gw, H, Wt, Wt]`` bias, and SDPA's CPU kernel needs
        a broadcastable mask (docs/models.md); the explicit path and
        ``torch.export`` go through :func:`attend_with_window_mask`.

        Args:
            q, k, v (Tensor): ``[B * nW, H, Wt, d]``, windows row-major.
            m (Tensor, optional): ``[B * nW, H, 1, d]`` still to apply.
            bias (Tensor): Relative position bias ``[1, H, Wt, Wt]``.
            mask (Tensor, optional): mmseg's shift mask ``[nW, Wt, Wt]``.
            grid (tuple[int, int]): Window rows and columns ``(gh, gw)``.
        """
        w_msa = self.w_msa
        options = dict(dropout_p=w_msa.attn_drop.p, scale=w_msa.scale)
        if mask is None:
            return self.attend(q, k, v, m, bias, **options)
        if torch.compiler.is_exporting() or \
                not self.fused_kernel(q, k, bias, options['dropout_p']):
            return attend_with_window_mask(self, q, k, v, m, bias, mask,
                                           **options)
        gh, gw = grid
        mask = mask[:, None].to(bias.dtype)
        inner, last = bias + mask[:gw], bias + mask[-gw:]
        outs = []
        for row in range(q.shape[0] // gw):
            rows = slice(row * gw, (row + 1) * gw)
            outs.append(
                self.attend(q[rows], k[rows], v[rows],
                            None if m is None else m[rows],
                            last if row % gh == gh - 1 else inner, **options))
        return torch.cat(outs)


def attend_with_window_mask(attn: EllipticalAttentionMixin,
                            q: Tensor,
                            k: Tensor,
                            v: Tensor,
                            m: Optional[Tensor],
                            bias: Optional[Tensor],
                            window_mask: Tensor,
                            dropout_p: float = 0.,
                            scale: Optional[float] = None) -> Tensor:
    """``attn.attend`` with ``window_mask[w]`` added to the scores of window
    ``w`` of every image.

    SDPA gets the bias plus mask of every window (one call that follows the
    window count of an exported graph); the explicit path sees the windows
    of each image as one more batch dimension, which the bias plus mask
    ``[nW, H, Wt, Wt]`` broadcasts over.

    Args:
        attn (EllipticalAttentionMixin): The attention.
        q, k, v (Tensor): ``[B * nW, H, Wt, d]``, the windows of an image
            consecutive.
        m (Tensor, optional): ``[B * nW, H, 1, d]``.
        bias (Tensor, optional): Bias broadcastable to ``[1, H, Wt, Wt]``.
        window_mask (Tensor): ``[nW, Wt, Wt]`` additive mask.
        dropout_p (float): Dropout on the probabilities (training only).
        scale (float, optional): Score scale.

    Returns:
        Tensor: ``[B * nW, H, Wt, d]``.
    """
    mask = window_mask.to(q.dtype)[:, None]  # [nW, 1, Wt, Wt]
    if bias is not None:
        mask = mask + bias.to(q.dtype)
    windows = mask.shape[0]
    if attn.fused_kernel(q, k, mask, dropout_p):
        images = q.shape[0] // windows
        mask = mask.repeat(images, 1, 1, 1) if images > 1 else mask
        return attn.attend(q, k, v, m, mask, dropout_p, scale)
    q, k, v, m = (None if t is None else t.unflatten(0, (-1, windows))
                  for t in (q, k, v, m))
    return attn.attend(q, k, v, m, mask, dropout_p, scale).flatten(0, 1)
