"""Build a segmentor for export; test an ONNX graph as tools/test.py tests
the PyTorch model."""
import copy
from typing import Dict, Optional

import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import DefaultScope
from mmengine.runner import Runner, load_checkpoint
from mmseg.registry import MODELS
from mmseg.utils import register_all_modules

from .runtime import onnx_model_cfg


def build_segmentor(cfg: Config,
                    checkpoint: Optional[str] = None) -> nn.Module:
    """The config's segmentor on the CPU in eval mode, SyncBN as BN, with
    ``checkpoint``'s weights (random weights without one).

    Args:
        cfg (Config): A config read with ``no_pretrained=True``.
        checkpoint (str, optional): A checkpoint of the model.
    """
    register_all_modules(init_default_scope=False)
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.pop('train_cfg', None)
    with DefaultScope.overwrite_default_scope(
            cfg.get('default_scope', 'mmseg')):
        segmentor = MODELS.build(ConfigDict(model_cfg))
    if checkpoint is not None:
        load_checkpoint(segmentor, checkpoint, map_location='cpu')
    return revert_sync_batchnorm(segmentor).eval()


def run_test(cfg: Config, work_dir: str) -> Dict[str, float]:
    """``Runner.from_cfg(cfg).test()``: what mmseg's tools/test.py runs."""
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    cfg.launcher = 'none'
    return Runner.from_cfg(cfg).test()


def evaluate_pytorch(cfg: Config, checkpoint: str,
                     work_dir: str) -> Dict[str, float]:
    """The metrics of the config's model with ``checkpoint`` (tools/test.py
    CONFIG CHECKPOINT)."""
    cfg = copy.deepcopy(cfg)
    cfg.load_from = checkpoint
    return run_test(cfg, work_dir)


def evaluate_onnx(cfg: Config,
                  onnx_file: str,
                  work_dir: str,
                  threads: Optional[int] = None) -> Dict[str, float]:
    """The metrics of ``onnx_file`` run by onnxruntime in place of the
    config's model, on the config's test dataloader and evaluator.

    Args:
        cfg (Config): The config the graph was exported from.
        onnx_file (str): The graph.
        work_dir (str): The Runner's work dir (logs).
        threads (int, optional): onnxruntime's intra-op threads.

    Returns:
        dict: The evaluator's metrics.
    """
    cfg = copy.deepcopy(cfg)
    cfg.model = onnx_model_cfg(cfg.model, onnx_file, threads)
    cfg.load_from = None
    return run_test(cfg, work_dir)
