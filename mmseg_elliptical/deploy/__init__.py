"""ONNX export of the plugin's segmentors and onnxruntime inference.

:mod:`.export` writes the graph of a segmentor's whole-mode seg logits
(``torch.onnx.export(..., dynamo=True)``), :mod:`.shapes` picks the size a
dynamic graph is traced at, :mod:`.runtime` runs a graph in mmseg's
inference (``ONNXRuntimeSegmentor``: slide inference outside the graph),
:mod:`.verify` compares it with ``predict`` and :mod:`.evaluate` tests it
on a config's test dataloader; :mod:`.deform_attn` and :mod:`.query_heads`
hold the export versions of mmcv's deformable attention and mmdet's
MaskFormer / Mask2Former parts (swapped in for an export only). onnx,
onnxruntime and onnxscript are the ``[deploy]`` extra: without them this
package imports and what needs them raises an ``ImportError`` naming the
extra.
"""
from ..errors import ExportError
from ..utils.files import check_onnx_file
from .evaluate import (build_segmentor, evaluate_onnx, evaluate_pytorch,
                       run_test)
from .export import (ExportResult, SegLogits, check_exportable, export_onnx,
                     fixed_input_size, input_channels)
from .requirements import INSTALL_HINT, missing_packages, require_deploy
from .runtime import (ONNXRuntimeSegmentor, check_input, onnx_model_cfg,
                      ort_session, run_session)
from .shapes import trace_shape
from .verify import Parity, compare, verification_shapes, verify

__all__ = [
    'ExportError', 'check_onnx_file', 'build_segmentor', 'evaluate_onnx',
    'evaluate_pytorch', 'run_test', 'ExportResult', 'SegLogits',
    'check_exportable', 'export_onnx', 'fixed_input_size', 'input_channels',
    'INSTALL_HINT', 'missing_packages', 'require_deploy',
    'ONNXRuntimeSegmentor', 'check_input', 'onnx_model_cfg', 'ort_session',
    'run_session', 'trace_shape', 'Parity', 'compare', 'verification_shapes',
    'verify'
]
