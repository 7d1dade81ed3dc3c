#!/usr/bin/env python
"""Benchmark elliptical backbones against their dot-product baselines.

Each config's elliptical model and baselines (``fused-dot``: the same config
with ``elliptical_layers=[]``; ``mmseg-dot``: mmseg's own class; with
``--roles``, ``paper-ref``: the explicit path) are measured in one process,
interleaved round by round: parameters, FLOPs, time per step (inference,
training; with ``--attack-sizes`` the plain and adaptive attack steps and,
with ``--apgd-steps``, an APGD-MCE iteration), memory, the ratios of
elliptical to each baseline judged against the targets
(``mmseg_elliptical/benchmark/targets.py``), adaptive / plain
and APGD / PGD per model; with ``--at-sizes``, adversarial / plain training
step. Writes ``benchmark.{json,md,csv,png}``; docs/benchmark.md. Example::

    python tools/analysis_tools/benchmark.py  # ViT-T 512, batch 1
    python tools/analysis_tools/benchmark.py --attack-sizes 512 --apgd-steps 10
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
import sys
from typing import Dict, Optional, Sequence

from mmseg_elliptical.robustness.attacks.cells import check_apgd_steps
from mmseg_elliptical.utils import model_names, write_report
from mmseg_elliptical.utils.arguments import (add_cfg_options, add_timing,
                                              add_work_dir, config_file,
                                              non_negative_int, positive_int,
                                              tool_main)
from mmseg_elliptical.utils.choices import DEFAULT_ROLES, MEMORY, ROLES
from mmseg_elliptical.utils.files import require_deploy

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIG = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s [CONFIG ...] [options]')
    p.add_argument(
        'configs',
        nargs='*',
        type=config_file,
        default=[DEFAULT_CONFIG],
        help='config files ("mmseg::" paths allowed; default: ViT-T)')
    p.add_argument('--names', nargs='+', help='one name per config')
    p.add_argument(
        '--roles',
        nargs='+',
        choices=ROLES,
        default=list(DEFAULT_ROLES),
        help='variants of each config to measure')
    p.add_argument(
        '--whole-model',
        action='store_true',
        help='time the segmentor (mode="tensor"), not the backbone')
    p.add_argument(
        '--sizes',
        type=positive_int,
        nargs='+',
        default=[512],
        help='square input sizes (inference)')
    p.add_argument(
        '--train-sizes',
        type=positive_int,
        nargs='*',
        default=None,
        help='sizes with a training step (default: --sizes)')
    p.add_argument(
        '--attack-sizes',
        type=positive_int,
        nargs='*',
        default=[],
        help='sizes with the attack steps: forward and backward to the '
        'input, in eval mode, plain and through m (default: none)')
    p.add_argument(
        '--apgd-steps',
        type=non_negative_int,
        default=0,
        help='with the attack steps, APGD-MCE runs of N (>= 4) iterations, '
        'timed per iteration (default 0: none)')
    p.add_argument(
        '--at-sizes',
        type=positive_int,
        nargs='*',
        default=[],
        help='sizes with the adversarial training steps (segmentors; the '
        'AT recipes against a plain step; default: none)')
    p.add_argument(
        '--flops-sizes',
        type=positive_int,
        nargs='*',
        default=None,
        help='sizes at which FLOPs are counted (default: --sizes)')
    add_timing(p, 10, 'model')
    p.add_argument(
        '--warmup',
        type=non_negative_int,
        default=1,
        help='untimed steps per model and (size, mode)')
    p.add_argument('--amp', action='store_true', help='bf16 autocast')
    p.add_argument('--compile', action='store_true', help='torch.compile')
    p.add_argument(
        '--compile-backend',
        default='inductor',
        help='torch.compile backend (default inductor)')
    p.add_argument(
        '--compile-mode',
        choices=('default', 'reduce-overhead', 'max-autotune-no-cudagraphs'),
        default='default',
        help='torch.compile mode (reduce-overhead: CUDA graphs)')
    p.add_argument(
        '--memory',
        choices=MEMORY,
        default='tensors',
        help='peak of tensor memory in one step (the profiler\'s records on '
        'the CPU, max_memory_allocated on CUDA), or none')
    p.add_argument(
        '--saved-tensors',
        action='store_true',
        help='also measure what a training forward saves for backward')
    p.add_argument(
        '--onnxruntime',
        action='store_true',
        help='also time each elliptical model exported to ONNX and run by '
        'onnxruntime (inference, CPU; needs the deploy extra)')
    add_work_dir(p, 'work_dirs/benchmark')
    add_cfg_options(p)
    args = p.parse_args(argv)
    try:
        model_names(args.configs, args.names)
    except ValueError as e:
        p.error(f'argument --names: {e}')
    if args.clock == 'process' and args.device != 'cpu':
        p.error('--clock process measures CPU time: use it with --device cpu')
    if args.onnxruntime and args.device != 'cpu':
        p.error('--onnxruntime runs on the CPU: use it with --device cpu')
    try:
        check_apgd_steps(args.apgd_steps)
        if args.onnxruntime:
            require_deploy('--onnxruntime')
    except (ImportError, ValueError) as e:
        p.error(str(e))
    for kind in ('train', 'flops'):  # default: --sizes
        if getattr(args, f'{kind}_sizes') is None:
            setattr(args, f'{kind}_sizes', args.sizes)
    for kind in ('train', 'attack'):
        if set(getattr(args, f'{kind}_sizes')) - set(args.sizes):
            p.error(f'--{kind}-sizes must be among --sizes')
    args.parser = p  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Run the benchmark; return the report (as in ``benchmark.json``)."""
    args = parse_args(argv)
    from mmengine.utils import ProgressBar

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical import benchmark as bench
    from mmseg_elliptical.benchmark import reporting
    from mmseg_elliptical.benchmark import training as at
    from mmseg_elliptical.benchmark.targets import judge
    from mmseg_elliptical.utils.devices import check_device
    check_device(args.parser, args.device)
    if check_only:
        return None
    specs = bench.config_variants(args.configs, args.names, args.roles,
                                  args.whole_model, args.cfg_options)
    options = bench.BenchmarkOptions.from_args(args)
    print('Models: ' + ', '.join(s.name for s in specs))
    bar = ProgressBar(
        (sum(len(modes)
             for _, modes in options.groups()) + len(args.at_sizes) *
         (1 + len(at.RECIPES))) * len(specs) * args.rounds)
    # First: a model the hook refuses ends the run before the long part.
    training = at.measure_training(specs, args.at_sizes, options, bar.update)
    report = bench.run_benchmark(specs, options, bar.update)
    report['adversarial_training'] = training
    report['ratios'] = [judge(r) for r in report['ratios']]
    report['meta']['command'] = ' '.join([
        'python tools/analysis_tools/benchmark.py',
        *(sys.argv[1:] if argv is None else argv)
    ])
    text = reporting.markdown(report)
    files = write_report(
        args.work_dir,
        'benchmark',
        data=report,
        markdown=text,
        table=reporting.csv_table(report),
        figure=reporting.figure(report))
    print(f'\n{text}\nWrote {", ".join(files)}')
    return report


if __name__ == '__main__':
    main()
