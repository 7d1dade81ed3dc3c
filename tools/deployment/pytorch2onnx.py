#!/usr/bin/env python
"""Export a segmentor to ONNX: the graph of its whole-mode seg logits.

The graph's input is the batch as the config's data_preprocessor outputs it
(normalised), its output the seg logits at the input size, as mmseg's
``predict`` returns them (``mmseg_elliptical.deploy``; docs/deploy.md).
mmseg 0.x's options. Needs the deploy extra: pip install -e ".[deploy]".

Example (the demo model of ``make demo``)::

    python tools/deployment/pytorch2onnx.py $DEMO_CONFIG \\
        --checkpoint work_dirs/demo_elliptical/iter_3000.pth \\
        --output-file demo.onnx --shape 64 64 --dynamic-export --verify
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
import sys
from typing import List, Optional, Sequence

from mmseg_elliptical.utils import load_config
from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, checkpoint_file,
                                              config_file, fail,
                                              non_negative_int, positive_float,
                                              positive_int, tool_main)
from mmseg_elliptical.utils.choices import OPSET
from mmseg_elliptical.utils.files import require_deploy


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s CONFIG [--checkpoint CKPT] [--output-file FILE] '
        '[--shape H [W]] [--dynamic-export] [--verify] [options]')
    p.add_argument(
        'config',
        type=config_file,
        help='config file ("mmseg::" paths '
        'allowed)')
    p.add_argument(
        '--checkpoint',
        type=checkpoint_file,
        help='checkpoint of the model (without: random weights)')
    p.add_argument('--output-file', default='tmp.onnx', help='ONNX file')
    p.add_argument(
        '--shape',
        type=positive_int,
        nargs='+',
        help='input height and width (one number: square); default: the '
        'crop_size of the config\'s test_cfg')
    p.add_argument(
        '--dynamic-export',
        action='store_true',
        help='dynamic batch, height and width (BEiT / MAE: batch only)')
    p.add_argument(
        '--verify',
        action='store_true',
        help='compare onnxruntime with PyTorch\'s predict at --shape (and, '
        'dynamic, at another size and batch)')
    p.add_argument(
        '--tolerance',
        type=positive_float,
        default=1e-3,
        help='largest relative difference --verify accepts')
    p.add_argument(
        '--opset-version',
        type=positive_int,
        default=OPSET,
        help=f'ONNX opset, {OPSET} or later (torch\'s dynamo exporter)')
    p.add_argument(
        '--threads',
        type=non_negative_int,
        default=1,
        help='torch and onnxruntime threads (0: their defaults)')
    add_cfg_options(p, 'the config, e.g. model.backbone.img_size=640')
    add_allow_partial(p)
    args = p.parse_args(argv)
    if args.shape is not None and len(args.shape) not in (1, 2):
        p.error(f'argument --shape: {args.shape}: give HEIGHT WIDTH, or one '
                'number for a square')
    if args.opset_version < OPSET:
        p.error(f'argument --opset-version: {args.opset_version} is below '
                f'{OPSET}, the oldest opset torch\'s dynamo exporter writes')
    if osp.isdir(args.output_file) or args.output_file.endswith(osp.sep):
        p.error(f'argument --output-file: {args.output_file} is a folder; '
                'give the path of the .onnx file to write')
    return args


def export_shape(args: argparse.Namespace, cfg) -> List[int]:
    """--shape, or the crop size of the config's test_cfg."""
    if args.shape:
        return args.shape * 2 if len(args.shape) == 1 else args.shape
    crop = (cfg.model.get('test_cfg') or {}).get('crop_size')
    if crop is None:
        fail('argument --shape: give HEIGHT WIDTH (the config\'s test_cfg '
             'has no crop_size)')
    return list(crop)


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[dict]:
    """Export (and verify); return what was done."""
    args = parse_args(argv)
    if check_only:
        return None
    try:
        require_deploy('tools/deployment/pytorch2onnx.py')
    except ImportError as error:
        sys.exit(str(error))
    import torch

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.deploy import (build_segmentor, export_onnx,
                                         fixed_input_size, input_channels,
                                         ort_session, verification_shapes,
                                         verify)
    from mmseg_elliptical.engine import check_weights_fit
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.cfg_options, no_pretrained=True)
    shape = export_shape(args, cfg)
    if args.checkpoint is None:
        print('No --checkpoint: exporting random weights.')
    else:
        note = check_weights_fit(args.config, args.checkpoint,
                                 args.cfg_options, args.allow_partial)
        if note:
            print(note)
    segmentor = build_segmentor(cfg, args.checkpoint)
    result = export_onnx(segmentor, args.output_file, shape,
                         args.dynamic_export, args.opset_version)
    axes = ', '.join(f'{a}: {n}' for a, n in result.dynamic_axes.items())
    print(f'Wrote {result.file} in {result.seconds:.1f} s: input '
          f'[B, {input_channels(segmentor)}, H, W] at {shape[0]}x{shape[1]}'
          f' (traced at {result.trace_shape[0]}x{result.trace_shape[1]}), '
          f'dynamic axes: {axes or "none"}.')
    for note in result.notes:
        print(note)
    report = dict(export=result, parity=[])
    if args.verify:
        session = ort_session(args.output_file, args.threads or None)
        shapes = verification_shapes(shape, args.dynamic_export,
                                     fixed_input_size(segmentor) is not None)
        report['parity'] = verify(segmentor, session, shapes,
                                  input_channels(segmentor))
        for parity in report['parity']:
            print(f'onnxruntime vs PyTorch predict at {list(parity.shape)}: '
                  f'max abs diff {parity.max_abs:.3g}, max rel diff '
                  f'{parity.max_rel:.3g}')
        worst = max(p.max_rel for p in report['parity'])
        if worst >= args.tolerance:
            sys.exit(f'Verification failed: relative difference {worst:.3g}'
                     f' >= --tolerance {args.tolerance:g}.')
        print(f'Verified: relative differences < {args.tolerance:g}.')
    return report


if __name__ == '__main__':
    main()
