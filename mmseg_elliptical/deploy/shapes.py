"""The size at which a dynamic export is traced.

``torch.export`` records the path that mmseg's Python branches on sizes take
at the traced input, and the exported graph takes that path at every size.
Three such branches decide whether a graph follows the input size:

* ``AdaptivePadding`` (the patch embeddings of the ViT, Swin and PCPVT and
  Swin's patch merging) pads only when the size is not a multiple of the
  stride: traced without padding, the graph never pads;
* Swin's ``ShiftWindowMSA`` pads to whole windows and crops back only when
  the feature map is not a multiple of the window;
* the ViT resizes its position embedding only when the patch grid is not
  that of ``img_size``.

Their padding / resizing branch is the identity where nothing is to be
padded or resized (padding by 0, bicubic resizing to the same size), so a
graph traced where each branch pads or resizes is right at every size.
:func:`trace_shape` finds the nearest such size by running the model once per
candidate, with forward hooks that record the branches.

Tracing with symbolic sizes costs time in proportion to how complex their
expressions grow through the stages. ``AdaptivePadding`` computes its
padding with ``math.ceil`` of a true division and ``max``, which nest into
expressions that take ``torch.export`` minutes per stage of a Swin; during
an export :func:`export_friendly` gives it :class:`ExportAdaptivePadding`'s
integer arithmetic (the same paddings), restored afterwards; it also gives
``nn.AdaptiveAvgPool2d`` bins that follow the input size
(:class:`ExportAdaptiveAvgPool2d`), which torch's exporter fixes at the
traced size, and mmseg's ``Upsample`` an output size that stays symbolic
(:class:`ExportUpsample`). The same mechanism (:data:`EXPORT_VERSIONS`)
gives mmcv's deformable attention and mmdet's MaskFormer / Mask2Former parts
their export versions (:mod:`.deform_attn`, :mod:`.query_heads`).
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
    """mmseg's ``AdaptivePadding`` with integer padding arithmetic.

    ``ceil(size / stride)`` as ``(size + stride - 1) // stride``, and no
    ``max(pad, 0)`` where the padding cannot be negative (kernel >= stride):
    the same paddings, in expressions that ``torch.export`` simplifies
    (the padded size of a patch embedding becomes ``stride * ceil``, and the
    next stage's size a plain floor division of the input size).
    """

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
    """``adaptive_avg_pool``'s bins of ``size`` into ``out``: from
    ``floor(i * size / out)`` to ``ceil((i + 1) * size / out)``."""
    # Non-negative operands only: the exporter writes a symbolic floor
    # division as ONNX's Div, which truncates negative quotients.
    return [((i * size) // out, ((i + 1) * size + out - 1) // out)
            for i in range(out)]


class ExportAdaptiveAvgPool2d(nn.AdaptiveAvgPool2d):
    """``nn.AdaptiveAvgPool2d`` whose bins follow the input size in an
    exported graph.

    torch's ONNX exporter writes ``adaptive_avg_pool2d`` with the bins of the
    traced size (at another size: wrong averages or an onnxruntime index
    error; the pyramid pooling of UPerNet's and PSPNet's heads). The same
    average of each bin, as means over the bins' rows, then their columns
    (equal weights, so the mean of the means).
    """

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
    """mmseg's ``Upsample`` whose output size follows the input size in an
    exported graph.

    mmseg computes the size as ``int(size * scale_factor)``: ``int`` of a
    symbolic float makes ``torch.export`` write the traced value into the
    graph, without an error or a guard that onnxruntime checks (seen: SETR's
    MLA head, a relative error of 0.1 at any other size). The same sizes,
    ``size * int(scale_factor)`` for an integral factor (SETR's, FPN's) and
    ``torch.sym_int`` (also a truncation) otherwise.
    """

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


#: mmseg / torch / mmcv / mmdet class -> the export version
#: :func:`export_friendly` gives (None: none needed; see :func:`export_class`).
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
    """The class a module of class ``cls`` has during an export, or None.

    The first class of ``cls``'s MRO in :data:`EXPORT_VERSIONS` decides: its
    export version for that class itself; for a subclass (e.g. mmseg's and
    the plugin's MaskFormer heads on mmdet's), a subclass of ``cls`` with the
    export version just above that class in the MRO, so that what the
    subclasses add still runs.
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
    """``copy.deepcopy`` returns symbolic ints as they are, as it does ints,
    for the duration.

    mmengine's data samples deep-copy their metainfo, and mmseg's MaskFormer
    and Mask2Former heads build data samples from the image metas; in a
    dynamic export ``img_shape`` holds ``torch.SymInt`` sizes, whose copy
    fails (``Cannot access data pointer of Tensor``). They are immutable,
    so the copy may be the same object.
    """
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
    """Give ``model``'s modules with an :func:`export_class` (mmseg's
    ``AdaptivePadding`` and ``Upsample``, ``AdaptiveAvgPool2d``, mmcv's
    deformable attention, mmdet's pixel decoders and MaskFormer head) that
    class for the duration, and their own back afterwards; symbolic sizes
    deep-copy meanwhile (:func:`copyable_sizes`)."""
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


#: Candidates tried by :func:`trace_shape`: the shape plus 0 .. MAX_OFFSET.
MAX_OFFSET = 64


def branch_hooks(model: nn.Module, record: List[bool]) -> list:
    """Forward hooks appending, per size-dependent branch, whether it took
    its general path (see the module docstring).

    Returns:
        list: The hook handles (call ``remove`` on each).
    """

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
    """Whether every size-dependent branch of ``model`` takes its general
    path at ``shape`` (one forward of a batch of 1, without gradient)."""
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
    """The size nearest above ``shape`` at which a dynamic export of
    ``model`` follows every input size.

    Args:
        model (nn.Module): The module to export (input ``[B, C, H, W]``).
        shape (Sequence[int]): The export size ``(H, W)``.
        channels (int): Input channels.

    Returns:
        tuple[int, int]: ``(H + i, W + i)`` for the smallest ``i`` in
        ``0 .. MAX_OFFSET`` at which each branch pads or resizes.
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
