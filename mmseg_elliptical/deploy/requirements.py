"""The optional ONNX stack: what the deploy code imports, or what to install
(:func:`~mmseg_elliptical.utils.files.require_deploy`; not through mmengine's
``is_installed`` / ``requires_package``: docs/deploy.md says why)."""
import importlib
from types import ModuleType

from ..utils.files import require_deploy


def onnxruntime() -> ModuleType:
    """``import onnxruntime``, or the ``ImportError`` of
    :func:`require_deploy`."""
    require_deploy('ONNX inference')
    return importlib.import_module('onnxruntime')
