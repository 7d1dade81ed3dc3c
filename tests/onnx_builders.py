"""Builders of the deployment tests' ONNX files: a small graph written with
onnx's helpers (no export), and the bad files beside it."""
import os
import os.path as osp
from typing import Dict


def onnx_graph(path: str,
               classes: int = 4,
               op: str = 'Conv',
               weights_apart: bool = False) -> str:
    """A small ONNX model written with onnx's helpers (no export): a 1x1
    convolution from ``[batch, 3, height, width]`` to ``classes`` channels
    (``op`` another name: a graph onnxruntime refuses); ``weights_apart``
    keeps the weights in ``PATH.data``, as torch's exporter does."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(
        np.ones((classes, 3, 1, 1), np.float32), 'weight')
    graph = helper.make_graph(
        [helper.make_node(op, ['input', 'weight'], ['seg_logits'])], 'tiny', [
            helper.make_tensor_value_info('input', TensorProto.FLOAT,
                                          ['batch', 3, 'height', 'width'])
        ], [
            helper.make_tensor_value_info(
                'seg_logits', TensorProto.FLOAT,
                ['batch', classes, 'height', 'width'])
        ], [weight])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid('', 18)])
    model.ir_version = 8
    onnx.save_model(
        model,
        path,
        save_as_external_data=weights_apart,
        location=osp.basename(path) + '.data',
        size_threshold=0)
    return path


#: What :func:`onnx_files` writes: a good graph and the ONNX files that
#: cannot serve, by name.
ONNX_FILES = ('good', 'cut', 'empty', 'page', 'apart', 'unknown')


def onnx_files(folder) -> Dict[str, str]:
    """A good ONNX graph (:func:`onnx_graph`) and the bad ones beside it in
    ``folder``: cut short, empty, a text page, one whose weights file is
    gone, one with an operator onnxruntime does not know.

    Returns:
        dict: ``{name: path}`` for the names of :data:`ONNX_FILES`.
    """
    paths = {n: osp.join(str(folder), f'{n}.onnx') for n in ONNX_FILES}
    with open(onnx_graph(paths['good']), 'rb') as f:
        data = f.read()
    with open(paths['cut'], 'wb') as f:
        f.write(data[:len(data) // 2])
    open(paths['empty'], 'wb').close()
    with open(paths['page'], 'w') as f:
        f.write('<html>404 Not Found</html>\n')
    onnx_graph(paths['apart'], weights_apart=True)
    os.remove(paths['apart'] + '.data')
    onnx_graph(paths['unknown'], op='NoSuchOp')
    return paths
