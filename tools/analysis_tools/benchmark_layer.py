#!/usr/bin/env python
"""Time one elliptical attention layer on its paths, interleaved.

One :class:`~mmseg_elliptical.models.EllipticalAttention` (default: ViT-T's,
1025 tokens, 192 dims, 3 heads) in eval mode, timed interleaved on four paths,
each paired per round with the dot-product one. Writes ``layer.{json,md}``.

* ``dot-product``: outside a value chain: one qkv GEMM and fused attention;
* ``elliptical no-grad``: the inference path: one qkv GEMM, ``m`` estimated
  from the values, ``q *= m`` in place, fused attention;
* ``elliptical grad``: the training path, forced under
  ``torch.enable_grad()`` (parameters not requiring grad, so no graph is
  kept): k and v from one GEMM, q from a second one, then ``q * m``;
* ``elliptical explicit``: the paper's formulation, materialised
  probabilities (``fused_attn=False``), under no-grad.

Example::

    # ViT-T at 512: 1025 tokens, 192 dims, 3 heads
    python tools/analysis_tools/benchmark_layer.py --rounds 60 \\
        --min-run-time 0.2 --work-dir work_dirs/speed/layer
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
from typing import Dict, Optional, Sequence

from mmseg_elliptical.utils.arguments import (add_timing, add_work_dir,
                                              positive_int)


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
    add_timing(p, 20, 'path')
    add_work_dir(p, 'work_dirs/benchmark')
    args = p.parse_args(argv)
    if len(args.shape) not in (0, 3):
        p.error(f'argument N: {args.shape}: give TOKENS DIMS HEADS, or '
                'nothing')
    if args.shape and args.shape[1] % args.shape[2]:
        p.error(f'argument N: DIMS {args.shape[1]} is no multiple of HEADS '
                f'{args.shape[2]}')
    args.parser = p  # for the checks after the heavy imports
    return args


def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Time the layer; return the report (as in ``layer.json``)."""
    args = parse_args(argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.benchmark.layer import (layer_benchmark,
                                                  layer_markdown)
    from mmseg_elliptical.utils.devices import check_device
    from mmseg_elliptical.utils.output import write_report
    check_device(args.parser, args.device)
    if check_only:
        return None
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
