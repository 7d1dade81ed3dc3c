#!/usr/bin/env python
"""Count what one step launches, elliptical against fused dot-product.

A config's backbone (default: ViT-T at 512) in both variants of
``tools/analysis_tools/benchmark.py``, one profiled step each after a
warm-up: on CUDA the kernels, on the CPU the top-level ops; the
difference per elliptical layer, and each step's profiler trace
(``elliptical.json``, ``fused-dot.json``, for chrome://tracing or Perfetto).
Writes ``kernels.{json,md}``. docs/benchmark.md, "One op for the estimator".

Example::

    python tools/analysis_tools/profile_kernels.py --device cuda --amp
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os
import os.path as osp
from typing import Dict, Optional, Sequence

from mmseg_elliptical.utils import write_report
from mmseg_elliptical.utils.arguments import (add_cfg_options, add_work_dir,
                                              config_file, device,
                                              positive_int, tool_main)

VIT_T = 'configs/segmenter/segmenter_elliptical-vit-t_mask_8xb1-160k_' \
    'ade20k-512x512.py'


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s [CONFIG] [options]')
    p.add_argument('config', nargs='?', type=config_file, default=VIT_T)
    p.add_argument('--device', type=device, default='cpu')
    p.add_argument('--size', type=positive_int, default=512)
    p.add_argument('--batch-size', type=positive_int, default=1)
    p.add_argument('--amp', action='store_true', help='bf16 autocast')
    p.add_argument('--mode', choices=('infer', 'train'), default='infer')
    add_cfg_options(p)
    add_work_dir(p, 'work_dirs/profile_kernels')
    args = p.parse_args(argv)
    args.parser = p  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Profile both variants; return the report (as in ``kernels.json``)."""
    args = parse_args(argv)
    import torch

    from mmseg_elliptical.benchmark.kernels import launches
    from mmseg_elliptical.benchmark.variants import (build_model,
                                                     config_variants,
                                                     make_step)
    from mmseg_elliptical.models import EllipticalAttentionMixin
    from mmseg_elliptical.utils.devices import check_device
    check_device(args.parser, args.device)
    if check_only:
        return None
    cuda = args.device.startswith('cuda')
    os.makedirs(args.work_dir, exist_ok=True)
    x = torch.randn(
        args.batch_size, 3, args.size, args.size, device=args.device)
    report = {k: v for k, v in vars(args).items() if k != 'parser'}
    report['what'] = 'kernels' if cuda else 'top-level ops'
    for spec in config_variants([args.config],
                                roles=('elliptical', 'fused-dot'),
                                cfg_options=args.cfg_options):
        model = build_model(spec, args.device)
        if spec.role == 'elliptical':
            report['elliptical_layers'] = sum(
                isinstance(m, EllipticalAttentionMixin) and m.elliptical
                for m in model.modules())
        report[spec.role] = launches(
            make_step(model, x, args.mode, args.amp), cuda,
            osp.join(args.work_dir, f'{spec.role}.json'))
    added = report['elliptical'] - report['fused-dot']
    report['added_per_layer'] = added / max(report['elliptical_layers'], 1)
    text = (f"{report['what']} of one {args.mode} step, {args.device}"
            f"{', bf16 autocast' if args.amp else ''}: elliptical "
            f"{report['elliptical']}, fused-dot {report['fused-dot']}; "
            f"{report['added_per_layer']:.2f} added per elliptical layer "
            f"({report['elliptical_layers']}).\n")
    files = write_report(args.work_dir, 'kernels', data=report, markdown=text)
    print(f'{text}Wrote {", ".join(files)} and the two traces')
    return report


if __name__ == '__main__':
    main()
