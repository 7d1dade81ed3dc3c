"""What the deploy code refuses: :class:`ExportError`, and the check of an
ONNX file before onnxruntime reads it."""
import os.path as osp

from .requirements import installed


class ExportError(ValueError):
    """A segmentor that cannot be exported or run as asked, or an ONNX file
    that cannot serve (missing, not ONNX, its weights file apart)."""


def check_onnx_file(path: str) -> str:
    """Raise :class:`ExportError` unless ``path`` is a readable ONNX model
    whose external weights (torch's ``FILE.onnx.data``) lie beside it.

    Without the onnx package (the ``[deploy]`` extra), only that the file
    exists is checked.

    Args:
        path (str): The ONNX file.

    Returns:
        str: ``path``.
    """
    if not osp.isfile(path):
        raise ExportError(f'ONNX file {path} does not exist' if not osp.exists(
            path) else f'ONNX file {path} is a folder, not a file')
    if not installed('onnx'):
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
