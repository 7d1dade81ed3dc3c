"""Where an image point lies on the patch grid, and patch maps as images."""
from typing import Sequence, Tuple

import cv2
import numpy as np


def query_patch(point: Sequence[int], ori_shape: Sequence[int],
                img_shape: Sequence[int], stride: Sequence[int],
                grid: Sequence[int]) -> Tuple[int, int]:
    """The patch ``(row, col)`` that covers a pixel of the original image.

    The pipeline resizes the original image to ``img_shape`` and the patch
    embedding pads it at the bottom/right to whole patches; the last row and
    column of patches may thus cover padding.

    Args:
        point (Sequence[int]): ``(x, y)``: column and row in the original
            image.
        ori_shape (Sequence[int]): ``(H, W)`` of the original image.
        img_shape (Sequence[int]): ``(h, w)`` of the resized input.
        stride (Sequence[int]): Patch stride ``(sh, sw)`` in input pixels.
        grid (Sequence[int]): Patch grid ``(rows, cols)``.

    Returns:
        tuple[int, int]: The patch's row and column.

    Raises:
        ValueError: If the point lies outside the original image.
    """
    x, y = point
    if not (0 <= x < ori_shape[1] and 0 <= y < ori_shape[0]):
        raise ValueError(f'point ({x}, {y}) lies outside the {ori_shape[1]} '
                         f'x {ori_shape[0]} image (x is the column, y the '
                         'row).')
    row = int(y * img_shape[0] / ori_shape[0]) // stride[0]
    col = int(x * img_shape[1] / ori_shape[1]) // stride[1]
    return min(row, grid[0] - 1), min(col, grid[1] - 1)


def upsample(grid: np.ndarray, stride: Sequence[int],
             img_shape: Sequence[int], ori_shape: Sequence[int]) -> np.ndarray:
    """A patch-grid map at the original image's resolution.

    Args:
        grid (np.ndarray): ``h x w`` values, one per patch.
        stride (Sequence[int]): Patch stride ``(sh, sw)`` in input pixels.
        img_shape (Sequence[int]): Size of the resized input before padding.
        ori_shape (Sequence[int]): Size of the original image.

    Returns:
        np.ndarray: ``ori_shape`` map.
    """
    full = np.kron(grid, np.ones(tuple(stride), dtype=grid.dtype))
    full = full[:img_shape[0], :img_shape[1]]
    if tuple(full.shape) != tuple(ori_shape[:2]):
        full = cv2.resize(full, (int(ori_shape[1]), int(ori_shape[0])),
                          interpolation=cv2.INTER_NEAREST)
    return full
