#!/usr/bin/env python
"""Time one elliptical attention layer on its paths, interleaved.

The paths (``mmseg_elliptical.benchmark.layer``): dot-product, the
inference path, the training path and the paper's explicit formulation,
each paired per round with the dot-product one. Writes ``layer.{json,md}``.

Example::

    # ViT-T at 512: 1025 tokens, 192 dims, 3 heads
    python tools/analysis_tools/benchmark_layer.py --rounds 60 \\
        --min-run-time 0.2 --work-dir work_dirs/speed/layer
"""
import argparse
from typing import Dict, Optional, Sequence

from mmseg_elliptical.benchmark import layer_benchmark, layer_markdown
from mmseg_elliptical.benchmark.timing import CLOCKS
from mmseg_elliptical.utils import write_report
from mmseg_elliptical.utils.arguments import (add_work_dir, device,
                                              non_negative_float,
                                              non_negative_int, positive_int)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s [TOKENS DIMS HEADS] [options]')
    p.add_argument(
        'shape',
        nargs='*',
        type=positive_int,
        metavar='N',
        help='TOKENS DIMS HEADS of the attention (default 1025 192 3)')
    p.add_argument('--batch-size', type=positive_int, default=1)
    p.add_argument(
        '--rounds',
        type=positive_int,
        default=20,
        help='interleaved timing rounds')
    p.add_argument(
        '--min-run-time',
        type=non_negative_float,
        default=0.,
        help='timed seconds per path and round (0: one step)')
    p.add_argument(
        '--threads', type=non_negative_int, default=1, help='torch threads')
    p.add_argument('--clock', choices=CLOCKS, default='wall')
    p.add_argument('--device', type=device, default='cpu')
    p.add_argument('--seed', type=int, default=0)
    add_work_dir(p, 'work_dirs/benchmark')
    args = p.parse_args(argv)
    if len(args.shape) not in (0, 3):
        p.error(f'argument N: {args.shape}: give TOKENS DIMS HEADS, or '
                'nothing')
    if args.shape and args.shape[1] % args.shape[2]:
        p.error(f'argument N: DIMS {args.shape[1]} is no multiple of HEADS '
                f'{args.shape[2]}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Time the layer; return the report (as in ``layer.json``)."""
    args = parse_args(argv)
    tokens, dims, heads = args.shape or (1025, 192, 3)
    report = layer_benchmark(tokens, dims, heads, args.batch_size, args.rounds,
                             args.min_run_time, args.threads, args.clock,
                             args.device, args.seed)
    text = layer_markdown(report)
    files = write_report(args.work_dir, 'layer', data=report, markdown=text)
    print(f'{text}\nWrote {", ".join(files)}')
    return report


if __name__ == '__main__':
    main()
