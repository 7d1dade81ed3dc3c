"""The optional ONNX stack: what the deploy code imports, or what to install
(not through mmengine's ``is_installed`` / ``requires_package``: docs/deploy.md
says why)."""
import importlib
import importlib.util
from types import ModuleType
from typing import Tuple

#: The ``[deploy]`` extra of setup.py: the exporter's (onnx, onnxscript)
#: and the runtime's (onnxruntime) packages.
DEPLOY_PACKAGES = ('onnx', 'onnxscript', 'onnxruntime')
INSTALL_HINT = 'pip install -e ".[deploy]"  (onnx, onnxruntime, onnxscript)'


def installed(name: str) -> bool:
    """Whether ``import name`` would find a module, without importing it (a
    ``None`` entry in ``sys.modules`` blocks the import: not found)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


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
