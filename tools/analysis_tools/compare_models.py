"""One report that compares two or more segmentors side by side.

For ``CONFIG CHECKPOINT`` pairs, on each config's test split: clean mIoU
(and per class), the robustness summary on chosen corruptions and
severities, representation collapse per layer, the attention of one query
pixel and the relevance ``m``, and speed and peak memory against each other
at one size. Everything measured is kept under ``<work-dir>/cells/``: rerun
the same command after an interruption and only what is missing is
computed. Outputs (in ``--work-dir``): ``report.md``, ``report.json`` and
the figures. The work is :mod:`mmseg_elliptical.analysis.comparison`. With
``--launcher pytorch`` (``tools/dist_launch.sh
analysis_tools/compare_models.py N ...``) or ``slurm`` the robustness and
collapse sections split the test images across the processes; rank 0
measures the rest and writes the report.

Example (``make report`` after ``make demo`` and ``make demo-dot``)::

    python tools/analysis_tools/compare_models.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --speed-size 64 --work-dir work_dirs/report
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
from typing import Dict, Optional, Sequence

from mmseg_elliptical.errors import GridError
from mmseg_elliptical.robustness.attacks.cells import ATTACK_PROTOCOLS
from mmseg_elliptical.robustness.corruption.cells import (DEFAULT_CORRUPTIONS,
                                                          resolve_corruptions,
                                                          resolve_severities)
from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, add_launcher,
                                              add_models, add_paired_test,
                                              device, launcher_of, models_of,
                                              non_negative_int, positive_int,
                                              tool_main)
from mmseg_elliptical.utils.choices import PARTS
from mmseg_elliptical.utils.images import image_file
from mmseg_elliptical.utils.preflight import check_run


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work (adds
    ``specs``)."""
    p = argparse.ArgumentParser(
        description='Compare segmentors side by side in one report.',
        usage='%(prog)s CONFIG CHECKPOINT CONFIG CHECKPOINT [...] [options]')
    add_models(p, help='two or more pairs of config file and checkpoint')
    p.add_argument(
        '--corruptions',
        nargs='+',
        default=list(DEFAULT_CORRUPTIONS),
        help='corruption names or sets (all, common, extra, noise, blur, '
        f'weather, digital); default: {" ".join(DEFAULT_CORRUPTIONS)}')
    p.add_argument(
        '--severities',
        nargs='+',
        type=int,
        default=[1, 5],
        help='severities 1-5 (default 1 5)')
    p.add_argument(
        '--max-images',
        type=positive_int,
        help='use only the first N test images')
    p.add_argument(
        '--seed', type=int, default=0, help='seed of the corruptions')
    p.add_argument(
        '--part',
        default='backbone',
        choices=PARTS,
        help='whose layers the collapse and attention sections show')
    p.add_argument(
        '--image',
        type=image_file,
        help='image of the attention figure (default: the first test image)')
    p.add_argument(
        '--point',
        nargs=2,
        type=non_negative_int,
        metavar=('X', 'Y'),
        help='query pixel (column, row; default: the image centre)')
    p.add_argument(
        '--layers',
        nargs='+',
        type=non_negative_int,
        help='layers of the attention figure')
    p.add_argument(
        '--heads',
        nargs='+',
        type=non_negative_int,
        help='heads of the attention figure')
    p.add_argument(
        '--speed-size',
        type=positive_int,
        default=512,
        help='square input size of the speed section')
    p.add_argument('--speed-batch', type=positive_int, default=1)
    p.add_argument('--speed-rounds', type=positive_int, default=10)
    p.add_argument(
        '--baseline',
        '--reference',
        dest='baseline',
        help='the model the others are compared with: corruption errors, '
        'paired tests, speed and memory ratios (default: the last)')
    add_paired_test(p)
    p.add_argument(
        '--attack-protocol',
        choices=list(ATTACK_PROTOCOLS),
        default='quick',
        help='attacks of the adversarial section (default: quick)')
    p.add_argument(
        '--no-adaptive',
        action='store_true',
        help='leave out the adaptive attack through m')
    p.add_argument(
        '--no-audit',
        action='store_true',
        help='leave out the gradient-masking audit (its eps sweep, doubled '
        'steps, transfer and square cells)')
    p.add_argument(
        '--attack-max-images',
        type=positive_int,
        default=32,
        help='attack only the first N test images (default: 32, the '
        'fewest the paired verdict takes; the audit\'s transfer and query '
        'cells make the section the report\'s longest)')
    p.add_argument(
        '--attack-batch-size',
        type=positive_int,
        help='images attacked together (default: the config\'s test batch; '
        'the per-image results do not depend on it)')
    p.add_argument(
        '--audit-queries',
        type=positive_int,
        default=20,
        help='queries of the audit\'s square attack (default: 20)')
    p.add_argument('--work-dir', default='work_dirs/report')
    p.add_argument('--device', type=device, default='cpu')
    p.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    add_cfg_options(p)
    add_allow_partial(p)
    add_launcher(p)
    args = p.parse_args(argv)
    for option, check in (('corruptions', resolve_corruptions),
                          ('severities', resolve_severities)):
        try:
            check(getattr(args, option))
        except GridError as e:
            p.error(f'argument --{option}: {e}')
    args.specs = models_of(p, args)
    check_run(p, args, args.specs, __file__)
    if len(args.arms) < 2:
        p.error(f'argument CONFIG CHECKPOINT: the report compares two or '
                f'more models, got {len(args.arms)} (arms: --names).')
    args.parser = p  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Write the report; return its JSON data (None on the processes but
    rank 0)."""
    args = parse_args(argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.analysis.comparison import (ReportOptions,
                                                      compare_models,
                                                      report_files)
    from mmseg_elliptical.engine import (checked_models, note_partial_loads,
                                         process_group)
    args.notes = checked_models(args)
    if check_only:
        return None
    options = ReportOptions.from_args(args)
    with process_group(launcher_of(args)) as options.launch:
        data = compare_models(
            args.specs, options, args.work_dir, quiet=not args.verbose)
    if data is None:  # not rank 0
        return None
    note_partial_loads(f'{args.work_dir}/report.md', args.notes)
    with open(f'{args.work_dir}/report.md') as f:
        print(f.read())
    print(f'Report in {args.work_dir} ({data["seconds"]} s): ' +
          ', '.join(report_files(args.work_dir)))
    return data


if __name__ == '__main__':
    main()
