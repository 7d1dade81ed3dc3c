"""onnxruntime inference of an exported segmentor, in mmseg's test loop
(mmseg's ``EncoderDecoder`` whose ``encode_decode`` runs the graph)."""
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from mmseg.models.segmentors import BaseSegmentor, EncoderDecoder
from mmseg.registry import MODELS
from torch import Tensor

from ..errors import ExportError
from ..utils.files import check_onnx_file
from .export import INPUT_NAME
from .requirements import onnxruntime

Dims = Tuple[Union[int, str, None], ...]


def ort_session(onnx_file: str, threads: Optional[int] = None):
    """An onnxruntime ``InferenceSession`` of ``onnx_file`` on the CPU.

    Args:
        onnx_file (str): The exported graph.
        threads (int, optional): Intra-op threads (None: one per core).

    Raises:
        ExportError: ``onnx_file`` cannot be served.
    """
    ort = onnxruntime()
    check_onnx_file(onnx_file)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    errors = tuple(
        getattr(ort.capi.onnxruntime_pybind11_state, name)
        for name in ('Fail', 'InvalidArgument', 'InvalidGraph',
                     'InvalidProtobuf', 'NotImplemented'))
    try:
        return ort.InferenceSession(
            onnx_file, options, providers=['CPUExecutionProvider'])
    except errors as e:
        first = str(e).strip().splitlines()[0]
        raise ExportError(
            f'onnxruntime cannot load {onnx_file}: {first}') from e


def input_dims(session) -> Dims:
    """The graph input's dimensions: ints, or names where dynamic."""
    return tuple(session.get_inputs()[0].shape)


def check_input(dims: Dims, shape: Sequence[int]) -> None:
    """Raise an :class:`ExportError` when ``shape`` does not fit ``dims``."""
    names = ('batch', 'channels', 'height', 'width')
    bad = [(n, d, s) for n, d, s in zip(names, dims, shape)
           if isinstance(d, int) and d != s]
    if len(shape) != len(dims) or bad:
        fixed = ', '.join(f'{n} {d} (got {s})' for n, d, s in bad)
        raise ExportError(
            f'The ONNX graph takes inputs of shape {list(dims)} (names: '
            f'dynamic), got {list(shape)}; fixed at export: {fixed}. Export '
            'with --dynamic-export (dynamic batch, height and width) or at '
            '--shape of these images; for slide inference, at the '
            'crop_size of test_cfg. BEiT and MAE take their img_size only.')


def run_session(session, inputs: Tensor) -> Tensor:
    """The graph's seg logits of a batch, as a tensor on ``inputs``' device.

    Args:
        session: An onnxruntime ``InferenceSession``.
        inputs (Tensor): ``[B, C, H, W]`` from the data preprocessor.
    """
    check_input(input_dims(session), inputs.shape)
    array = np.ascontiguousarray(inputs.detach().float().cpu().numpy())
    out, = session.run(None, {INPUT_NAME: array})
    return torch.from_numpy(out).to(inputs.device)


@MODELS.register_module()
class ONNXRuntimeSegmentor(EncoderDecoder):
    """mmseg's ``EncoderDecoder`` inference with onnxruntime as network
    (the decode head config serves mmseg's post-processing only).

    Args:
        onnx_file (str): The graph of :func:`~.export.export_onnx`.
        decode_head (dict): The config's decode head.
        test_cfg (dict, optional): The config's ``test_cfg``.
        data_preprocessor (dict, optional): The config's data preprocessor.
        threads (int, optional): onnxruntime's intra-op threads.
        init_cfg (dict, optional): Unused (mmengine's argument).
    """

    def __init__(self,
                 onnx_file: str,
                 decode_head: dict,
                 test_cfg: Optional[dict] = None,
                 data_preprocessor: Optional[dict] = None,
                 threads: Optional[int] = None,
                 init_cfg: Optional[dict] = None) -> None:
        # BaseSegmentor's construction: EncoderDecoder's builds a backbone
        BaseSegmentor.__init__(
            self, data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self._init_decode_head(decode_head)
        self.test_cfg = test_cfg
        self.train_cfg = None
        self.onnx_file = onnx_file
        self.session = ort_session(onnx_file, threads)
        classes = self.session.get_outputs()[0].shape[1]
        if isinstance(classes, int) and classes != self.out_channels:
            raise ExportError(
                f'{onnx_file} gives {classes} class scores, the config\'s '
                f'decode head {self.out_channels}: test the graph with the '
                'config it was exported from.')

    def encode_decode(self, inputs: Tensor,
                      batch_img_metas: List[dict]) -> Tensor:
        """The graph's seg logits at the input size."""
        return run_session(self.session, inputs)

    def extract_feat(self, inputs: Tensor):
        raise NotImplementedError(
            'ONNXRuntimeSegmentor runs the whole graph; it has no features '
            '(use predict).')

    def loss(self, inputs: Tensor, data_samples) -> dict:
        raise NotImplementedError(
            'ONNXRuntimeSegmentor is for inference only; train the PyTorch '
            'model and export it again.')

    def _forward(self, inputs: Tensor, data_samples=None) -> Tensor:
        return self.encode_decode(inputs, [])


def onnx_model_cfg(model_cfg: dict,
                   onnx_file: str,
                   threads: Optional[int] = None) -> dict:
    """The ``model`` config of :class:`ONNXRuntimeSegmentor` that runs
    ``onnx_file`` in place of the config's model ``model_cfg``."""
    decode_head = model_cfg['decode_head']
    if isinstance(decode_head, (list, tuple)):
        raise ExportError(
            'The config has a cascade of decode heads; ONNX inference '
            'supports EncoderDecoder configs with one decode head.')
    return dict(
        type='ONNXRuntimeSegmentor',
        onnx_file=onnx_file,
        decode_head=decode_head,
        test_cfg=model_cfg.get('test_cfg'),
        data_preprocessor=model_cfg.get('data_preprocessor'),
        threads=threads)
