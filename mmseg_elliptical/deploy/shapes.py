"""The size at which a dynamic export is traced, and the export versions
of modules whose sizes ``torch.export`` would fix at the traced input
(docs/deploy.md, "How a dynamic graph follows the input size").
"""
import copy
import functools
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmseg.models.backbones import VisionTransformer
from mmseg.models.backbones.swin import ShiftWindowMSA
from mmseg.models.utils import Upsample, resize
from mmseg.models.utils.embed import AdaptivePadding
from torch import Tensor

from ..errors import ExportError
from ..models.decode_heads.mmdet_extra import MMDET_AVAILABLE
from . import deform_attn


class ExportAdaptivePadding(AdaptivePadding):
    """mmseg's ``AdaptivePadding`` with integer padding arithmetic: the same
    paddings, in expressions that ``torch.export`` traces quickly."""

    def get_pad_shape(self, input_shape: Sequence[int]) -> Tuple[int, int]:
        pads = []
        for size, kernel, stride, dilation in zip(input_shape,
                                                  self.kernel_size,
                                                  self.stride, self.dilation):
            out = (size + stride - 1) // stride
            reach = (kernel - 1) * dilation + 1
            pad = (out - 1) * stride + reach - size
            pads.append(pad if reach >= stride else torch.sym_max(pad, 0))
        return tuple(pads)


def bins(size, out: int) -> List[Tuple]:
    """``adaptive_avg_pool``'s bins of ``size`` into ``out`` (non-negative
    operands: ONNX's ``Div`` truncates)."""
    return [((i * size) // out, ((i + 1) * size + out - 1) // out)
            for i in range(out)]


class ExportAdaptiveAvgPool2d(nn.AdaptiveAvgPool2d):
    """``nn.AdaptiveAvgPool2d`` whose bins follow the input size in an
    exported graph (torch's exporter fixes the traced size's)."""

    def forward(self, x: Tensor) -> Tensor:
        size = self.output_size
        out_h, out_w = (size, size) if isinstance(size, int) else size
        if out_h is None or out_w is None:
            return super().forward(x)
        rows = torch.cat([
            x[:, :, a:b].mean(2, keepdim=True)
            for a, b in bins(x.shape[-2], out_h)
        ], 2)
        return torch.cat([
            rows[..., a:b].mean(3, keepdim=True)
            for a, b in bins(x.shape[-1], out_w)
        ], 3)


class ExportUpsample(Upsample):
    """mmseg's ``Upsample`` whose output size stays symbolic in an exported
    graph (``int()`` of a symbolic float is silently the traced value)."""

    def forward(self, x: Tensor) -> Tensor:
        factor = self.scale_factor
        if self.size or not isinstance(factor, float):
            return super().forward(x)
        size = [scaled(s, factor) for s in x.shape[-2:]]
        return resize(x, size, None, self.mode, self.align_corners)


def scaled(size, factor: float):
    """``int(size * factor)`` that stays symbolic for a symbolic ``size``."""
    if factor.is_integer():
        return size * int(factor)
    return torch.sym_int(size * factor)


#: Class -> its export version (None: none needed).
EXPORT_VERSIONS: Dict[type, Optional[type]] = {
    AdaptivePadding: ExportAdaptivePadding,
    nn.AdaptiveAvgPool2d: ExportAdaptiveAvgPool2d,
    Upsample: ExportUpsample,
    **deform_attn.EXPORT_VERSIONS,
}
if MMDET_AVAILABLE:
    from . import query_heads  # needs mmdet (optional)
    EXPORT_VERSIONS.update(query_heads.EXPORT_VERSIONS)


def export_class(cls: type) -> Optional[type]:
    """The class a module of class ``cls`` has during an export, or None:
    for a subclass of a class in :data:`EXPORT_VERSIONS`, a subclass of
    ``cls`` with the export version in its MRO, so what it adds still runs.
    """
    for base in cls.__mro__:
        if base in EXPORT_VERSIONS:
            version = EXPORT_VERSIONS[base]
            if version is None or base is cls:
                return version
            return _export_subclass(cls, version)
    return None


@functools.lru_cache(maxsize=None)
def _export_subclass(cls: type, version: type) -> type:
    return type(f'Export{cls.__name__}', (cls, version),
                {'__module__': __name__})


@contextmanager
def copyable_sizes() -> Iterator[None]:
    """``copy.deepcopy`` returns ``torch.SymInt`` as it is for the duration
    (data samples deep-copy metainfo holding symbolic sizes)."""
    table = copy._deepcopy_dispatch  # the stdlib's table of atomic types
    before = table.get(torch.SymInt)
    table[torch.SymInt] = copy._deepcopy_atomic
    try:
        yield
    finally:
        if before is None:
            del table[torch.SymInt]
        else:
            table[torch.SymInt] = before


@contextmanager
def export_friendly(model: nn.Module) -> Iterator[None]:
    """Give ``model``'s modules their :func:`export_class` for the duration,
    under :func:`copyable_sizes`."""
    swapped = [(m, type(m)) for m in model.modules()
               if export_class(type(m)) is not None]
    for module, cls in swapped:
        module.__class__ = export_class(cls)
    try:
        with copyable_sizes():
            yield
    finally:
        for module, cls in swapped:
            module.__class__ = cls


MAX_OFFSET = 64


def branch_hooks(model: nn.Module, record: List[bool]) -> list:
    """Forward hooks appending to ``record``, per size-dependent branch,
    whether it pads or resizes; returns their handles."""

    def padding(module: AdaptivePadding, args) -> None:
        pads = module.get_pad_shape(args[0].shape[-2:])
        record.append(any(p > 0 for p in pads))

    def windows(module: ShiftWindowMSA, args) -> None:
        record.append(any(s % module.window_size for s in args[1]))

    def position(vit: VisionTransformer) -> Callable:

        def hook(module: nn.Module, args, out) -> None:
            h, w = out[1]
            record.append(h * w + 1 != vit.pos_embed.shape[1])

        return hook

    handles = []
    for module in model.modules():
        if isinstance(module, AdaptivePadding):
            handles.append(module.register_forward_pre_hook(padding))
        elif isinstance(module, ShiftWindowMSA):
            handles.append(module.register_forward_pre_hook(windows))
        elif isinstance(module, VisionTransformer):
            handles.append(
                module.patch_embed.register_forward_hook(position(module)))
    return handles


def general_at(model: nn.Module, shape: Sequence[int], channels: int) -> bool:
    """Whether every size-dependent branch of ``model`` pads or resizes at
    ``shape``."""
    record: List[bool] = []
    handles = branch_hooks(model, record)
    try:
        with torch.no_grad():
            model(torch.zeros(1, channels, *shape))
    finally:
        for handle in handles:
            handle.remove()
    return all(record)


def trace_shape(model: nn.Module, shape: Sequence[int],
                channels: int) -> Tuple[int, int]:
    """``(H + i, W + i)`` for the smallest ``i <= MAX_OFFSET`` at which
    every size-dependent branch pads or resizes, so a dynamic export follows
    every input size.

    Args:
        model (nn.Module): The module to export.
        shape (Sequence[int]): The export size ``(H, W)``.
        channels (int): Input channels.

    Raises:
        ExportError: If no such size is found.
    """
    for offset in range(MAX_OFFSET + 1):
        candidate = (shape[0] + offset, shape[1] + offset)
        if general_at(model, candidate, channels):
            return candidate
    raise ExportError(
        f'No size from {tuple(shape)} to {candidate} makes every padding and '
        'position-embedding branch of the model pad or resize, so a dynamic '
        'export would not follow the input size; export without '
        '--dynamic-export (a graph for one size).')
