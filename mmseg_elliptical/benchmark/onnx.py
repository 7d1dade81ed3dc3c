"""The onnxruntime row of the benchmark: the benchmarked module exported
(static graph) and run by onnxruntime on the CPU, in inference."""
import os.path as osp
import tempfile
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from ..deploy import ort_session, require_deploy
from ..deploy.export import OPSET
from ..deploy.shapes import export_friendly
from .timing import paired_ratio

ROLE = 'onnxruntime'


def onnxruntime_step(model: nn.Module, x: Tensor,
                     threads: int) -> Callable[[], None]:
    """One onnxruntime inference of ``model``'s graph on ``x`` (CPU), with
    ``threads`` intra-op threads (0: its default)."""
    require_deploy('The onnxruntime row of the benchmark')
    if x.device.type != 'cpu':
        raise ValueError('The onnxruntime row runs on the CPU: benchmark '
                         'with --device cpu.')
    with tempfile.TemporaryDirectory() as folder:
        path = osp.join(folder, 'model.onnx')
        # the export versions, for the export only
        with torch.no_grad(), export_friendly(model):
            torch.onnx.export(
                model.eval(), (x, ),
                path,
                dynamo=True,
                opset_version=OPSET,
                verbose=False)
        session = ort_session(path, threads or None)
    feed = {session.get_inputs()[0].name: x.numpy()}

    def step() -> None:
        session.run(None, feed)

    return step


def onnx_name(name: str) -> str:
    """The name of model ``name``'s onnxruntime row."""
    return f'{name} ({ROLE})'


def runtime_ratios(results: Sequence[Dict]) -> List[Dict]:
    """onnxruntime / PyTorch eager (the same model), per size: the
    :func:`~.timing.paired_ratio` of their round medians and the time per
    image of each."""
    table = {(r['model'], r['size'], r['mode']): r for r in results}
    rows = []
    for ort in (r for r in results if r['role'] == ROLE):
        eager = table[(ort['pytorch'], ort['size'], ort['mode'])]
        rows.append(
            dict(
                family=ort['family'],
                model=ort['pytorch'],
                size=ort['size'],
                onnxruntime_ms_per_image=ort['median_ms'] / ort['batch_size'],
                pytorch_ms_per_image=eager['median_ms'] / eager['batch_size'],
                **paired_ratio(ort['round_ms'], eager['round_ms']).row()))
    return rows
