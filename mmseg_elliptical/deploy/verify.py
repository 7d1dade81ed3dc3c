"""The exported graph against the PyTorch model: mmseg's ``predict``."""
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.config import ConfigDict
from torch import Tensor

from ..errors import ExportError
from .runtime import run_session


@dataclass
class Parity:
    """onnxruntime's seg logits against ``predict``'s on one batch.

    Attributes:
        shape (tuple[int, ...]): The input shape ``(B, C, H, W)``.
        max_abs (float): The largest absolute difference.
        max_rel (float): ``max_abs`` over the largest absolute logit.
    """
    shape: Tuple[int, ...]
    max_abs: float
    max_rel: float


def predict_seg_logits(segmentor: nn.Module, inputs: Tensor) -> Tensor:
    """``segmentor.predict(inputs)``'s ``seg_logits``, stacked ``[B, C, H,
    W]`` (whole or slide inference, as the config's ``test_cfg`` says)."""
    with torch.no_grad():
        samples = segmentor.predict(inputs)
    return torch.stack([s.seg_logits.data for s in samples])


def compare(segmentor: nn.Module, session, inputs: Tensor) -> Parity:
    """onnxruntime's ``session`` against ``segmentor.predict`` on
    ``inputs``, both as whole inference of the batch."""
    reference = predict_seg_logits(segmentor, inputs)
    out = run_session(session, inputs)
    if out.shape != reference.shape:
        raise ExportError(f'The ONNX graph gives seg logits of shape '
                          f'{tuple(out.shape)}, predict '
                          f'{tuple(reference.shape)}: was it exported from '
                          'this config?')
    diff = float((out - reference).abs().max())
    scale = float(reference.abs().max())
    return Parity(
        tuple(inputs.shape), diff, diff / scale if scale > 0 else diff)


def verification_shapes(shape: Sequence[int],
                        dynamic: bool,
                        fixed_size: bool = False) -> List[Tuple[int, ...]]:
    """The batch shapes ``(B, H, W)`` a graph is verified at: the export
    size at a batch of 1 and, for a dynamic graph, a batch of 2 at another
    height and width (BEiT / MAE: the same size)."""
    h, w = int(shape[0]), int(shape[1])
    shapes = [(1, h, w)]
    if dynamic:
        shapes.append((2, h, w) if fixed_size else (2, h * 3 // 4 + 3, w + 5))
    return shapes


def verify(segmentor: nn.Module,
           session,
           shapes: Sequence[Sequence[int]],
           channels: int = 3,
           seed: int = 0) -> List[Parity]:
    """:func:`compare` on standard-normal batches of each ``(B, H, W)``,
    ``predict`` in whole mode (the graph is one crop of slide inference)."""
    generator = torch.Generator().manual_seed(seed)
    test_cfg = segmentor.test_cfg
    segmentor.test_cfg = ConfigDict(dict(test_cfg or {}, mode='whole'))
    try:
        return [
            compare(segmentor, session,
                    torch.randn(b, channels, h, w, generator=generator))
            for b, h, w in shapes
        ]
    finally:
        segmentor.test_cfg = test_cfg
