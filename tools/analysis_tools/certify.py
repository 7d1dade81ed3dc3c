"""Certified robustness of one or more segmentors, side by side:
randomised smoothing, certified per pixel (SegCertify: Fischer, Baader and
Vechev, ICML 2021).

For each noise level ``sigma`` (0-1 scale) every test image gets ``n0``
noisy copies that pick each pixel's class and ``n`` more that count it,
each an independent Gaussian draw added before mmseg's normalisation and
seeded by the image, so every model sees the same draws. A pixel certifies
at ``tau`` when a one-sided binomial test, corrected over the image's pixels
(Holm or Bonferroni) at ``alpha``, shows its class's probability above
``tau``: its class then holds within the L2 radius ``sigma * Phi^-1(tau)``;
other pixels abstain and count as wrong. Each finished cell is saved to
``<work-dir>/certify.json`` at once, so a rerun resumes; ``--launcher
pytorch`` (``tools/dist_certify.sh``) or ``slurm``
(``tools/slurm_certify.sh``) splits the images across processes. The report
gives per model the certified mIoU, aAcc and abstain rate per radius, and
against ``--baseline`` the arms' paired verdict (a hierarchical bootstrap
over images and, for repeated ``--names``, training seeds). Outputs (in
``--work-dir``): ``certify.{json,md,csv,png}``, ``certify_verdicts.json``
and ``areas/``.

Example (after ``make demo`` and ``make demo-dot``; ``make certify``)::

    python tools/analysis_tools/certify.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --baseline dot-product \\
        --sigmas 0.25 0.5 --work-dir work_dirs/certify
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
from typing import Dict, Optional, Sequence

from mmseg_elliptical.errors import AnalysisError
from mmseg_elliptical.robustness.certification.cells import (
    CORRECTIONS, certification_cells)
from mmseg_elliptical.utils import arguments as cli
from mmseg_elliptical.utils.preflight import check_run

#: Presets: ``(n0, n, taus, alpha)``; ``paper``: Fischer et al.'s
#: Cityscapes settings at n = 100; ``radii``: three radii per noise level
#: from the same draws (``make certify``).
PROTOCOLS = dict(
    paper=(10, 100, (0.75, ), 0.001), radii=(10, 200, (0.6, 0.75, 0.9), 0.001))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and check the command line before any work; adds ``cells``
    and ``specs``."""
    parser = argparse.ArgumentParser(
        description='Segmentors certified by randomised smoothing '
        '(SegCertify), side by side.',
        usage='%(prog)s CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [options]')
    cli.add_models(
        parser,
        baseline='the arm the paired verdict compares with, normally the '
        'dot-product twin')
    presets = '; '.join(
        f'{k}: n0 {p[0]}, samples {p[1]}, tau {p[2]}, alpha {p[3]}'
        for k, p in PROTOCOLS.items())
    parser.add_argument(
        '--protocol',
        choices=list(PROTOCOLS),
        default='paper',
        help=f'defaults of --n0, --samples, --taus, --alpha: {presets}')
    parser.add_argument(
        '--sigmas',
        nargs='+',
        type=cli.positive_float,
        default=[0.25, 0.5],
        help='noise levels, standard deviation on the 0-1 scale (0.25 is '
        '64 of 255 levels; default 0.25 0.5)')
    parser.add_argument(
        '--taus',
        nargs='+',
        type=float,
        help='thresholds in (0.5, 1): radius sigma * Phi^-1(tau)')
    parser.add_argument(
        '--n0', type=cli.positive_int, help='selection draws per image')
    parser.add_argument(
        '--samples',
        dest='n',
        type=cli.positive_int,
        help='counting draws per image, the paper\'s n (not --n: torchrun '
        'would take it for its own --nnodes)')
    parser.add_argument(
        '--alpha', type=float, help='family-wise error rate per image')
    parser.add_argument(
        '--corrections',
        nargs='+',
        choices=CORRECTIONS,
        default=list(CORRECTIONS),
        help='corrections over an image\'s pixels (default: both)')
    parser.add_argument(
        '--noise-batch',
        type=cli.positive_int,
        default=32,
        help='noisy copies per forward pass (default 32; the results do '
        'not depend on it)')
    parser.add_argument(
        '--max-images',
        type=cli.positive_int,
        help='certify only the first N images')
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the draws')
    cli.add_work_dir(parser, 'work_dirs/certify')
    cli.add_allow_partial(parser)
    cli.add_paired_test(parser)
    parser.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    cli.add_cfg_options(parser)
    cli.add_launcher(parser)
    args = parser.parse_args(argv)
    n0, n, taus, alpha = PROTOCOLS[args.protocol]
    args.n0, args.n = args.n0 or n0, args.n or n
    args.taus = args.taus or list(taus)
    args.alpha = alpha if args.alpha is None else args.alpha
    try:
        args.cells = certification_cells(args.sigmas, args.taus,
                                         args.corrections, args.n0, args.n,
                                         args.alpha, args.seed,
                                         args.noise_batch)
    except AnalysisError as e:
        parser.error(f'the certification cells: {e}')
    hopeless = [t for t in args.taus if t**args.n > args.alpha]
    if hopeless:
        parser.error(f'argument --taus: with n={args.n} counting draws no '
                     f'pixel can certify at tau {hopeless} (the smallest '
                     f'p-value, tau^n, exceeds alpha={args.alpha}); raise '
                     '--samples (a 64x64 image under Holm needs about '
                     'log(alpha / 4096) / log(tau)).')
    args.specs = cli.models_of(parser, args)
    check_run(parser, args, args.specs, __file__, store='certify.json')
    args.parser = parser  # for the checks after the heavy imports
    return args


@cli.tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Run the grid; return the JSON data of the results."""
    args = parse_args(argv)
    from mmengine.dist import is_main_process

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine import (fitting_models, note_partial_loads,
                                         process_group)
    from mmseg_elliptical.robustness.certification.report import \
        write_certify_report
    from mmseg_elliptical.robustness.certification.verdicts import \
        certify_verdicts
    from mmseg_elliptical.robustness.grid.run import run_cells
    args.notes = fitting_models(args.parser, args.specs, args.cfg_options,
                                args.allow_partial)
    if check_only:
        return None
    settings = dict(threat='certify', n0=args.n0, n=args.n, alpha=args.alpha)
    with process_group(cli.launcher_of(args)) as launch:
        store = run_cells(
            args.specs, [(None, None), *args.cells],
            osp.join(args.work_dir, 'certify.json'),
            args.work_dir,
            seed=args.seed,
            max_images=args.max_images,
            cfg_options=args.cfg_options,
            quiet=not args.verbose,
            launch_options=launch,
            settings=settings)
        if is_main_process():
            verdicts = certify_verdicts(store, [s.name for s in args.specs],
                                        args.cells, args.arms, args.baseline,
                                        args.resamples, args.bootstrap_seed)
            text = write_certify_report(verdicts, settings, args.work_dir)
            print(
                text +
                note_partial_loads(f'{args.work_dir}/certify.md', args.notes))
            print(f'Results in {args.work_dir}/certify.{{json,md,csv,png}}')
    return store.data


if __name__ == '__main__':
    main()
