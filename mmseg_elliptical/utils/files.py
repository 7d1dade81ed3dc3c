"""Checks of the files a user gives, before anything reads them: a torch
checkpoint (:func:`check_checkpoint`) and an ONNX model
(:func:`check_onnx_file`); and whether an optional package is there to read
one with (:func:`installed`), the deploy extra's too (:func:`require_deploy`).
"""
import ast
import importlib.util
import os
import os.path as osp
import zipfile
from typing import Optional, Tuple

from ..errors import CheckpointError, ExportError


def installed(name: str) -> bool:
    """Whether ``import name`` would find a module, without importing it (a
    ``None`` entry in ``sys.modules`` blocks the import: not found)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


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


def unreadable_reason(path: str) -> Optional[str]:
    """Why a file cannot be a complete torch checkpoint, or None (read: the
    first bytes and a zip archive's central directory, not the tensors)."""
    if os.path.getsize(path) == 0:
        return 'it is empty'
    with open(path, 'rb') as f:
        head = f.read(64)
    if head.startswith(b'PK\x03\x04'):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return ('it is cut short: a zip archive (torch\'s format) '
                    'without its end, as a download or copy that stopped '
                    'midway leaves it')
        if not any(n.split('/')[-1] == 'data.pkl' for n in names):
            return 'it is a zip archive, but not one torch wrote'
        return None
    if head.startswith(b'\x80'):
        return None
    try:
        text = head.decode('utf-8')
    except UnicodeDecodeError:
        return f'it is no torch file (it starts with {head[:8]!r})'
    if path.endswith('.py') or is_python_source(path):
        return CONFIG_REASON
    first = text.strip().splitlines()[0][:40] if text.strip() else ''
    return f'it is a text file (it starts with {first!r})'


CONFIG_REASON = 'it is Python source: a config, not a checkpoint'


def is_python_source(path: str) -> bool:
    """Whether a small text file parses as Python (a config)."""
    if os.path.getsize(path) > 1 << 20:
        return False
    try:
        with open(path, encoding='utf-8') as f:
            ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    return True


def checkpoint_error(path: str, reason: str) -> CheckpointError:
    """The error for an unreadable checkpoint: path, size, cause, fix."""
    fix = ('Give the .pth file that training saved in its place (the tools '
           'take CONFIG CHECKPOINT pairs, config first)'
           if reason == CONFIG_REASON else
           'Download it again, or save it again with torch.save / mmengine')
    return CheckpointError(
        f'Checkpoint {path} ({os.path.getsize(path):,} bytes) is not a '
        f'complete torch checkpoint: {reason}. {fix}.')


def check_checkpoint(path: str) -> str:
    """Return ``path`` if it has the structure of a torch checkpoint.

    Raises:
        FileNotFoundError: No such file.
        CheckpointError: Empty, cut short or another kind of file.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'Checkpoint {path} does not exist.')
    reason = unreadable_reason(path)
    if reason is not None:
        raise checkpoint_error(path, reason)
    return path


def check_onnx_file(path: str) -> str:
    """Return ``path`` if it is a readable ONNX model with its external
    weights beside it (without onnx installed: if it exists).

    Raises:
        ExportError: Otherwise.
    """
    if not osp.isfile(path):
        raise ExportError(f'ONNX file {path} does not exist' if not osp.exists(
            path) else f'ONNX file {path} is a folder, not a file')
    if not installed('onnx'):  # the [deploy] extra
        return path
    import onnx
    from google.protobuf.message import DecodeError
    size = osp.getsize(path)
    reason = 'it is empty' if size == 0 else None
    if reason is None:
        try:
            model = onnx.load(path, load_external_data=False)
            reason = None if model.graph.output else 'its graph is empty'
        except (DecodeError, ValueError, RuntimeError):
            reason = 'it does not parse as one'
    if reason:
        raise ExportError(
            f'{path} ({size} bytes) is not an ONNX model: {reason}. Export '
            'one with tools/deployment/pytorch2onnx.py, or copy it again if '
            'the copy stopped midway.')
    folder = osp.dirname(osp.abspath(path))
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = {e.key: e.value for e in tensor.external_data}['location']
        if not osp.isfile(osp.join(folder, location)):
            raise ExportError(
                f'{path} keeps its weights in {location}, which is not '
                f'beside it in {folder}: copy the two files together.')
    return path
