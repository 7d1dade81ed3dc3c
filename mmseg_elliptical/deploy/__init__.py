"""ONNX export of the plugin's segmentors and onnxruntime inference; onnx,
onnxruntime and onnxscript are the ``[deploy]`` extra (docs/deploy.md)."""
from ..errors import ExportError
from ..utils.files import (INSTALL_HINT, check_onnx_file, missing_packages,
                           require_deploy)
from .evaluate import (build_segmentor, evaluate_onnx, evaluate_pytorch,
                       run_test)
from .export import (ExportResult, SegLogits, check_exportable, export_onnx,
                     fixed_input_size, input_channels)
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
