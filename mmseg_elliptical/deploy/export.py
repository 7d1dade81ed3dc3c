"""ONNX export of a segmentor: the graph of ``encode_decode``'s seg logits
at the input size (docs/deploy.md)."""
import os
import os.path as osp
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmseg.models.backbones import BEiT
from torch import Tensor

from ..errors import ExportError
from ..models.attention.core import EllipticalAttentionMixin
from ..utils.choices import OPSET
from ..utils.files import require_deploy
from .shapes import export_friendly, trace_shape

INPUT_NAME, OUTPUT_NAME = 'input', 'seg_logits'


class SegLogits(nn.Module):
    """The exported computation: ``segmentor.encode_decode`` at the input
    size (``segmentor`` an ``EncoderDecoder`` in eval mode)."""

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        self.segmentor = segmentor

    def forward(self, inputs: Tensor) -> Tensor:
        # mmseg's heads resize to a torch.Size img_shape (slide's branch)
        meta = dict(img_shape=inputs.shape[2:])
        return self.segmentor.encode_decode(inputs, [meta])


@dataclass
class ExportResult:
    """What :func:`export_onnx` wrote.

    Attributes:
        file (str): The ONNX file.
        shape (tuple[int, int]): The export size.
        trace_shape (tuple[int, int]): The size it was traced at.
        dynamic_axes (dict[int, str]): Dynamic input axes and their names.
        seconds (float): Wall time of the export.
        notes (list[str]): What the user should know.
    """
    file: str
    shape: Tuple[int, int]
    trace_shape: Tuple[int, int]
    dynamic_axes: Dict[int, str]
    seconds: float
    notes: List[str] = field(default_factory=list)


def input_channels(segmentor: nn.Module) -> int:
    """The channels of the segmentor's input (its first convolution's)."""
    conv = next((m for m in segmentor.modules() if isinstance(m, nn.Conv2d)),
                None)
    return 3 if conv is None else conv.in_channels


def fixed_input_size(segmentor: nn.Module) -> Optional[Tuple[int, int]]:
    """The only input size (``img_size``) of a BEiT / MAE backbone, or
    None."""
    for module in segmentor.modules():
        if isinstance(module, BEiT):
            return tuple(int(s) for s in module.img_size)
    return None


def part_of(name: str) -> str:
    """The config key (``model.backbone``) of a submodule's name."""
    return 'model.' + name.split('.')[0]


def check_exportable(segmentor: nn.Module, shape: Sequence[int]) -> None:
    """Raise an :class:`ExportError` for the median estimator, BEiT / MAE
    at another size than ``img_size``, or a size the model does not run at
    (one eager forward).

    Args:
        segmentor (nn.Module): The segmentor.
        shape (Sequence[int]): The export size ``(H, W)``.
    """
    median = sorted({
        part_of(name)
        for name, m in segmentor.named_modules()
        if isinstance(m, EllipticalAttentionMixin) and m.elliptical
        and m.relevance_reduction == 'median'
    })
    if median:
        keys = ' '.join(f'{p}.relevance_reduction=mean' for p in median)
        raise ExportError(
            f"relevance_reduction='median' ({', '.join(median)}) cannot be "
            'exported to ONNX: torch\'s exporters have no translation of '
            "aten::median. Export with relevance_reduction='mean' (the "
            f'paper\'s estimator; --cfg-options {keys}); the checkpoint '
            'loads unchanged (m has no parameters), the predictions are '
            'those of the mean.')
    fixed = fixed_input_size(segmentor)
    if fixed is not None and tuple(shape) != fixed:
        raise ExportError(
            f'{type(segmentor.backbone).__name__} sizes its relative '
            f'position tables from img_size={fixed}, so its graph takes '
            f'{fixed[0]}x{fixed[1]} inputs only, not {shape[0]}x{shape[1]}: '
            f'export with --shape {fixed[0]} {fixed[1]} (slide inference '
            f'with crop_size={fixed} covers other image sizes), or set '
            'model.backbone.img_size to the size you need.')
    x = torch.zeros(1, input_channels(segmentor), *shape)
    try:
        with torch.no_grad():
            SegLogits(segmentor)(x)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ''
        raise ExportError(
            f'The model does not run at {shape[0]}x{shape[1]} ({first}): '
            'export at a larger --shape, e.g. the crop_size of its test_cfg.'
        ) from e


def export_onnx(segmentor: nn.Module,
                output_file: str,
                shape: Sequence[int],
                dynamic: bool = False,
                opset_version: int = OPSET) -> ExportResult:
    """Export ``segmentor``'s seg logits (:class:`SegLogits`) to ONNX.

    Args:
        segmentor (nn.Module): An mmseg ``EncoderDecoder`` (put in eval
            mode).
        output_file (str): The ``.onnx`` file to write.
        shape (Sequence[int]): The graph's size, or with ``dynamic`` the
            size it is verified at.
        dynamic (bool): Dynamic batch, height and width (BEiT / MAE: batch
            only); else a batch of 1 at ``shape``.
        opset_version (int): ONNX opset.
    """
    require_deploy('ONNX export')
    shape = (int(shape[0]), int(shape[1]))
    segmentor.eval()
    check_exportable(segmentor, shape)
    module = SegLogits(segmentor).eval()
    channels = input_channels(segmentor)
    notes = []
    axes: Dict[int, str] = {}
    trace, batch = shape, 1
    if dynamic:
        batch, axes = 2, {0: 'batch'}
        if fixed_input_size(segmentor) is None:
            trace = trace_shape(module, shape, channels)
            axes.update({2: 'height', 3: 'width'})
        else:
            notes.append(
                f'{type(segmentor.backbone).__name__} takes '
                f'{shape[0]}x{shape[1]} inputs only (its img_size): dynamic '
                'batch, fixed height and width.')
    folder = osp.dirname(osp.abspath(output_file))
    os.makedirs(folder, exist_ok=True)
    example = torch.randn(batch, channels, *trace)
    start = time.perf_counter()
    with torch.no_grad(), export_friendly(segmentor):
        torch.onnx.export(
            module, (example, ),
            output_file,
            dynamo=True,
            opset_version=opset_version,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=({
                axis: name
                for axis, name in axes.items()
            }, ) if axes else None,
            verbose=False)
    return ExportResult(output_file, shape, trace, axes,
                        time.perf_counter() - start, notes)
