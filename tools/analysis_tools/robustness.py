"""Corruption robustness of one or more segmentors, side by side.

For every corruption and severity, the config's test pipeline gets an
``ImageCorruption`` right after image loading and mmengine's test loop
computes the metric. Each model is built once; each finished cell is saved
to ``<work-dir>/robustness.json`` at once, so a rerun resumes. With
``--launcher pytorch`` (``tools/dist_robustness.sh``) or ``slurm``
(``tools/slurm_robustness.sh``) every cell's images are split across the
processes and rank 0 writes the results. The report gives P, mPC, rPC and,
against ``--baseline``, CE, mCE and rmCE, and a paired bootstrap of the mIoU
difference. Outputs (in ``--work-dir``): ``robustness.json``,
``robustness.md``, ``robustness.csv``, ``robustness_summary.csv``,
``robustness.png`` and ``areas/`` (per-image areas of every cell).

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/robustness.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --baseline dot-product \\
        --corruptions gaussian_noise fog --severities 1 5
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
from typing import Dict, Optional, Sequence

from mmseg_elliptical.errors import GridError
from mmseg_elliptical.robustness.corruption.cells import (CORRUPTION_SETS,
                                                          PROTOCOLS,
                                                          resolve_corruptions,
                                                          resolve_severities)
from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, add_launcher,
                                              add_models, add_paired_test,
                                              launcher_of, models_of,
                                              positive_int, tool_main)
from mmseg_elliptical.utils.preflight import check_run


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work: the files, the
    names, the cells (before the heavy imports; ``main`` checks whether each
    checkpoint fits its model). Adds ``specs``, ``protocol``,
    ``corruptions`` and ``severities``."""
    protocols = '; '.join(f'{k}: {p.description} ({p.passes} test passes '
                          'per model)' for k, p in PROTOCOLS.items())
    parser = argparse.ArgumentParser(
        description='Segmentors under image corruptions, side by side.',
        usage='%(prog)s CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [options]')
    add_models(
        parser,
        baseline='the model CE and mCE divide by and the paired test '
        'compares with, normally the dot-product twin')
    parser.add_argument(
        '--protocol',
        choices=list(PROTOCOLS),
        help=f'a preset of corruptions, severities and metrics: {protocols}.'
        ' Default: default, unless --corruptions or --severities are given')
    parser.add_argument(
        '--corruptions',
        nargs='+',
        help='corruption names, or sets: '
        f'{", ".join(CORRUPTION_SETS)} (default: the protocol\'s)')
    parser.add_argument(
        '--severities',
        nargs='+',
        type=int,
        help='severities 1-5 (default: the protocol\'s)')
    parser.add_argument(
        '--work-dir',
        default='work_dirs/robustness',
        help='where results (and the resumable JSON) go')
    parser.add_argument(
        '--max-images',
        type=positive_int,
        help='evaluate only the first N images')
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the corruptions')
    parser.add_argument(
        '--metric',
        help='metric of P, mPC and mCE (default: the protocol\'s, mIoU)')
    add_paired_test(parser)
    parser.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    add_cfg_options(parser)
    add_allow_partial(parser)
    add_launcher(parser)
    args = parser.parse_args(argv)
    if args.protocol and (args.corruptions or args.severities):
        parser.error(f'--protocol {args.protocol} sets the corruptions and '
                     'severities: drop --corruptions / --severities, or the '
                     'protocol.')
    args.protocol = PROTOCOLS[args.protocol or 'default']
    args.metric = args.metric or args.protocol.metrics[0]
    try:
        args.corruptions = resolve_corruptions(args.corruptions
                                               or args.protocol.corruptions)
    except GridError as e:
        parser.error(f'argument --corruptions: {e}')
    try:
        args.severities = resolve_severities(args.severities
                                             or args.protocol.severities)
    except GridError as e:
        parser.error(f'argument --severities: {e}')
    args.specs = models_of(parser, args)
    check_run(parser, args, args.specs, __file__, store='robustness.json')
    args.parser = parser  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Run the grid; return the JSON data of the results."""
    args = parse_args(argv)
    from mmengine.dist import is_main_process

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine import (fitting_models, note_partial_loads,
                                         process_group)
    from mmseg_elliptical.robustness.corruption.report import \
        write_robustness_report
    from mmseg_elliptical.robustness.corruption.verdicts import \
        corruption_verdicts
    from mmseg_elliptical.robustness.grid.run import run_grid
    args.notes = fitting_models(args.parser, args.specs, args.cfg_options,
                                args.allow_partial)
    if check_only:
        return None
    with process_group(launcher_of(args)) as launch:
        store = run_grid(
            args.specs,
            args.corruptions,
            args.severities,
            args.work_dir,
            args.metric,
            args.seed,
            args.max_images,
            args.cfg_options,
            quiet=not args.verbose,
            launch_options=launch)
        if is_main_process():
            metrics = args.protocol.metrics
            verdicts = corruption_verdicts(store, [s.name for s in args.specs],
                                           args.corruptions, args.severities,
                                           args.metric, args.baseline,
                                           metrics if len(metrics) > 1 else (),
                                           args.resamples, args.bootstrap_seed,
                                           args.arms)
            text = write_robustness_report(verdicts, args.work_dir)
            print(text + note_partial_loads(f'{args.work_dir}/robustness.md',
                                            args.notes))
            print(f'Results in {args.work_dir}/robustness.{{json,md,csv,png}}')
    return store.data


if __name__ == '__main__':
    main()
