#!/usr/bin/env python
"""Test an ONNX graph on a config's test dataloader with onnxruntime.

mmseg's test loop and metric (the config's ``test_evaluator``: IoUMetric)
with onnxruntime as the network; slide-mode configs slide outside the graph
(``mmseg_elliptical.deploy.ONNXRuntimeSegmentor``). With ``--checkpoint``,
the PyTorch model is tested as tools/test.py tests it, and the mIoU of the
two must agree within ``--tolerance``. Needs the deploy extra:
pip install -e ".[deploy]".

Example::

    python tools/deployment/onnx_test.py CONFIG model.onnx \\
        --checkpoint work_dirs/.../iter_3000.pth
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
import sys
from typing import Dict, Optional, Sequence

from mmseg_elliptical.utils import load_config
from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, checkpoint_file,
                                              config_file, non_negative_float,
                                              non_negative_int, onnx_file,
                                              tool_main)
from mmseg_elliptical.utils.files import require_deploy


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s CONFIG MODEL.onnx [--checkpoint CKPT] [options]')
    p.add_argument(
        'config',
        type=config_file,
        help='the config the graph was exported from')
    p.add_argument('model', type=onnx_file, help='the ONNX file')
    p.add_argument(
        '--checkpoint',
        type=checkpoint_file,
        help='also test this PyTorch checkpoint (as tools/test.py) and '
        'compare the mIoU')
    p.add_argument(
        '--tolerance',
        type=non_negative_float,
        default=0.01,
        help='largest mIoU difference (points) accepted with --checkpoint')
    p.add_argument(
        '--work-dir',
        help='the Runner\'s work dir (default: work_dirs/onnx_test/CONFIG)')
    p.add_argument(
        '--threads',
        type=non_negative_int,
        default=1,
        help='onnxruntime threads (0: its default)')
    add_cfg_options(p, 'the config, e.g. test_dataloader.batch_size=4')
    add_allow_partial(p)
    args = p.parse_args(argv)
    if args.work_dir and osp.isfile(args.work_dir):
        p.error(f'argument --work-dir: {args.work_dir} is a file; give a '
                'folder')
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict[str, Dict]]:
    """Test the graph (and the checkpoint); return their metrics."""
    args = parse_args(argv)
    if check_only:
        return None
    try:
        require_deploy('tools/deployment/onnx_test.py')
    except ImportError as error:
        sys.exit(str(error))
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.deploy import evaluate_onnx, evaluate_pytorch
    from mmseg_elliptical.engine import check_weights_fit
    note = args.checkpoint and check_weights_fit(
        args.config, args.checkpoint, args.cfg_options, args.allow_partial)
    if note:
        print(note)
    cfg = load_config(args.config, args.cfg_options, no_pretrained=True)
    work_dir = args.work_dir or osp.join(
        'work_dirs', 'onnx_test',
        osp.splitext(osp.basename(args.config))[0])
    metrics = dict(
        onnxruntime=evaluate_onnx(cfg, args.model, work_dir, args.threads
                                  or None))
    print(
        f'onnxruntime ({args.model}): {format_metrics(metrics["onnxruntime"])}'
    )
    if args.checkpoint:
        metrics['pytorch'] = evaluate_pytorch(cfg, args.checkpoint, work_dir)
        print(f'PyTorch ({args.checkpoint}): '
              f'{format_metrics(metrics["pytorch"])}')
        gap = abs(metrics['onnxruntime']['mIoU'] - metrics['pytorch']['mIoU'])
        print(f'mIoU difference: {gap:.4f} (tolerance {args.tolerance:g})')
        if gap > args.tolerance:
            sys.exit(f'The ONNX mIoU differs from PyTorch\'s by {gap:.4f} > '
                     f'--tolerance {args.tolerance:g}.')
    return metrics


def format_metrics(metrics: Dict[str, float]) -> str:
    """``mIoU 73.76, aAcc 93.82, ...``."""
    return ', '.join(f'{k} {v:.2f}' for k, v in metrics.items())


if __name__ == '__main__':
    main()
