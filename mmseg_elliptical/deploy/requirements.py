"""The optional ONNX stack: what the deploy code imports, or what to install
(not through mmengine's ``is_installed`` / ``requires_package``: docs/deploy.md
says why)."""
import importlib
from types import ModuleType
from typing import Tuple

from ..utils.files import installed

#: The ``[deploy]`` extra of setup.py: the exporter's (onnx, onnxscript)
#: and the runtime's (onnxruntime) packages.
DEPLOY_PACKAGES = ('onnx', 'onnxscript', 'onnxruntime')
INSTALL_HINT = 'pip install -e ".[deploy]"  (onnx, onnxruntime, onnxscript)'


def missing_packages() -> Tuple[str, ...]:
    """The packages of the ``[deploy]`` extra that are not installed."""
    return tuple(name for name in DEPLOY_PACKAGES if not installed(name))


def require_deploy(what: str) -> None:
    """Raise an ``ImportError`` naming the extra unless it is installed.

    Args:
        what (str): What needs it, for the message (e.g. ``'ONNX export'``).
    """
    missing = missing_packages()
    if missing:
        raise ImportError(
            f'{what} needs {", ".join(missing)}, which are not installed; '
            f'install the deploy extra: {INSTALL_HINT}.')


def onnxruntime() -> ModuleType:
    """``import onnxruntime``, or the ``ImportError`` of
    :func:`require_deploy`."""
    require_deploy('ONNX inference')
    return importlib.import_module('onnxruntime')
