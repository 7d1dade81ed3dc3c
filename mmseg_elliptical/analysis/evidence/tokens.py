"""From image pixels to tokens and from attention rows back to the image,
following a stage's :class:`~mmseg_elliptical.models.transformer.TokenLayout`.
"""
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from ...models.transformer import TokenLayout
from .layers import AnalysisError

Box = Tuple[int, int, int, int]  # y1, y2, x1, x2 in the resized input


def slide_boxes(img_shape: Sequence[int], crop: Sequence[int],
                stride: Sequence[int]) -> List[Box]:
    """The crops ``(y1, y2, x1, x2)`` of mmseg's sliding-window inference
    (``EncoderDecoder.slide_inference``), in its order.

    Args:
        img_shape (Sequence[int]): ``(h, w)`` of the input.
        crop (Sequence[int]): ``test_cfg.crop_size``.
        stride (Sequence[int]): ``test_cfg.stride``.
    """
    (h, w), (ch, cw), (sh, sw) = img_shape, crop, stride
    rows = max(h - ch + sh - 1, 0) // sh + 1
    cols = max(w - cw + sw - 1, 0) // sw + 1
    boxes = []
    for r in range(rows):
        for c in range(cols):
            y2, x2 = min(r * sh + ch, h), min(c * sw + cw, w)
            boxes.append((max(y2 - ch, 0), y2, max(x2 - cw, 0), x2))
    return boxes


def input_point(point: Sequence[int], ori_shape: Sequence[int],
                img_shape: Sequence[int]) -> Tuple[int, int]:
    """A pixel ``(x, y)`` of the original image in the resized input.

    Raises:
        AnalysisError: If the point lies outside the original image.
    """
    x, y = point
    if not (0 <= x < ori_shape[1] and 0 <= y < ori_shape[0]):
        raise AnalysisError(f'point ({x}, {y}) lies outside the '
                            f'{ori_shape[1]} '
                            f'x {ori_shape[0]} image (x is the column, y the '
                            'row).')
    return (int(x * img_shape[1] / ori_shape[1]),
            int(y * img_shape[0] / ori_shape[0]))


def query_token(point: Sequence[int], box: Box, stride: Sequence[int],
                grid: Sequence[int]) -> Tuple[int, int]:
    """The grid token ``(row, col)`` over an input pixel.

    Args:
        point (Sequence[int]): ``(x, y)`` in the resized input.
        box (Box): The crop the model saw.
        stride (Sequence[int]): Input pixels per token ``(sh, sw)``.
        grid (Sequence[int]): Token grid ``(h, w)``.

    Raises:
        ValueError: If the point lies outside the crop.
    """
    x, y = point
    y1, y2, x1, x2 = box
    if not (y1 <= y < y2 and x1 <= x < x2):
        raise ValueError(f'input pixel ({x}, {y}) lies outside the crop '
                         f'{box}.')
    row = (y - y1) // stride[0]
    col = (x - x1) // stride[1]
    return min(row, grid[0] - 1), min(col, grid[1] - 1)


def window_keys(slots: Tensor, query: int,
                tokens_per_window: int) -> Tuple[int, int, Tensor, Tensor]:
    """Where a query token and its window's keys sit in windowed attention.

    Args:
        slots (Tensor): The attention's ``image_slots`` ``[h * w]``.
        query (int): The query token (row-major grid index).
        tokens_per_window (int): ``T``.

    Returns:
        tuple: The query's window and position in it, the grid tokens of
        that window and their positions in it.
    """
    slot = int(slots[query])
    window, position = divmod(slot, tokens_per_window)
    members = torch.nonzero(slots // tokens_per_window == window).flatten()
    return window, position, members, slots[members] % tokens_per_window


def attention_row(probs: Tensor,
                  layout: TokenLayout,
                  grid: Sequence[int],
                  query: Sequence[int],
                  attention: Optional[nn.Module] = None,
                  image: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """One query token's attention as a map on the token grid.

    Args:
        probs (Tensor): One call's probabilities ``[B', H, N, M]``.
        layout (TokenLayout): The layer's layout (with a grid).
        grid (Sequence[int]): The call's grid ``(h, w)``.
        query (Sequence[int]): The query token ``(row, col)``.
        attention (nn.Module, optional): The layer's attention, for
            ``'windows'`` keys.
        image (int): Image of the batch.

    Returns:
        tuple[np.ndarray, np.ndarray]: ``[H, h, w]`` probability of each
        key over the grid tokens it covers, and ``[H]`` the probability on
        keys that are no grid token.
    """
    h, w = grid
    q = query[0] * w + query[1]
    if layout.keys == 'windows':
        slots = attention.image_slots((h, w), probs.device)
        T = probs.shape[-1]
        gh, gw = attention.window_grid((h, w))
        windows = gh * gw
        window, position, members, keys = window_keys(slots, q, T)
        row = probs[image * windows + window, :, position]  # [H, T]
        out = probs.new_zeros(row.shape[0], h * w)
        out[:, members] = row[:, keys]
        maps = out.view(-1, h, w)
    elif layout.keys == 'reduced':
        r = layout.reduction
        hr, wr = h // r, w // r
        row = probs[image, :, layout.prefix + q]
        if row.shape[-1] != hr * wr:
            raise ValueError(f'{row.shape[-1]} keys are not the {hr} x {wr} '
                             f'grid of a {h} x {w} grid reduced by {r}.')
        maps = probs.new_zeros(row.shape[0], h, w)
        maps[:, :hr * r, :wr * r] = row.view(-1, hr, wr).repeat_interleave(
            r, 1).repeat_interleave(r, 2)
        return maps.float().cpu().numpy(), np.zeros(row.shape[0])
    else:
        row = probs[image, :, layout.prefix + q]
        maps = row[:, layout.prefix:layout.prefix + h * w].reshape(-1, h, w)
    maps = maps.float().cpu().numpy()
    off_grid = 1 - maps.reshape(maps.shape[0], -1).sum(-1)
    return maps, np.clip(off_grid, 0, 1)


def grid_to_image(maps: np.ndarray, stride: Sequence[int], box: Box,
                  input_shape: Sequence[int], img_shape: Sequence[int],
                  ori_shape: Sequence[int]) -> np.ndarray:
    """Token-grid maps ``[H, h, w]`` drawn at the original image's
    resolution ``[H, *ori_shape]`` (0 outside the crop; nearest neighbour).

    Args:
        maps (np.ndarray): ``[H, h, w]``.
        stride (Sequence[int]): Input pixels per token ``(sh, sw)``.
        box (Box): The crop in the input.
        input_shape (Sequence[int]): ``(h, w)`` of the model's input.
        img_shape (Sequence[int]): ``(h, w)`` of the resized image in it.
        ori_shape (Sequence[int]): ``(h, w)`` of the original image.
    """
    y1, y2, x1, x2 = box
    full = np.kron(maps, np.ones((1, *stride), dtype=maps.dtype))
    canvas = np.zeros((maps.shape[0], *input_shape[:2]), dtype=maps.dtype)
    hh, ww = min(full.shape[1], y2 - y1), min(full.shape[2], x2 - x1)
    canvas[:, y1:y1 + hh, x1:x1 + ww] = full[:, :hh, :ww]
    canvas = canvas[:, :img_shape[0], :img_shape[1]]
    if tuple(img_shape[:2]) == tuple(ori_shape[:2]):
        return canvas
    return np.stack([
        cv2.resize(
            m, (int(ori_shape[1]), int(ori_shape[0])),
            interpolation=cv2.INTER_NEAREST) for m in canvas
    ])
