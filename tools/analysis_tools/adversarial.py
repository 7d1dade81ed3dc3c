"""Adversarial robustness of one or more segmentors, side by side.

Every model is attacked on the config's test images (PGD, SegPGD, CosPGD,
FGSM; L-inf or L2) at each eps, through mmengine's runner and test loop, and
each finished cell is saved to ``<work-dir>/adversarial.json`` at once, so a
rerun resumes. With ``--launcher pytorch`` (``tools/dist_adversarial.sh``) or
``slurm`` (``tools/slurm_adversarial.sh``) every cell's images are split
across the processes and rank 0 writes. The report gives the mIoU per attack
and eps, the per-image worst case over the attacks, the means over eps and,
against ``--baseline``, a paired bootstrap over images. ``--adaptive`` lets
the gradient flow through the relevance ``m`` too: each model with
elliptical layers is attacked both ways (a model without them has no ``m``:
its plain attack is the adaptive one). Outputs (in
``--work-dir``): ``adversarial.{json,md,csv,png}`` and ``areas/``.

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/adversarial.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --baseline dot-product \\
        --protocol quick --work-dir work_dirs/adversarial
"""  # noqa: E501
import argparse
from typing import Dict, List, Optional, Sequence

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.engine import (fitting_models, note_partial_loads,
                                     process_group)
from mmseg_elliptical.utils import arguments as cli


def epsilon(text: str) -> float:
    """An eps: a finite number in [0, 255]."""
    value = cli.non_negative_float(text)
    if value > 255:
        raise argparse.ArgumentTypeError(f'{text!r} is above 255 (eps is in '
                                         '0-255 levels for L-inf, 0-1 for '
                                         'L2)')
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and check the command line before any work; adds ``cells``
    (the plain attack cells), ``specs`` and ``elliptical`` (whether each
    model has elliptical layers)."""
    presets = '; '.join(
        f'{k}: {p.description} ({p.passes()[0]} forward and {p.passes()[1]} '
        'backward passes per image and model)'
        for k, p in rb.ATTACK_PROTOCOLS.items())
    parser = argparse.ArgumentParser(
        description='Segmentors under white-box attacks, side by side.',
        usage='%(prog)s CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [options]')
    cli.add_models(
        parser,
        baseline='the model the paired test compares with, normally the '
        'dot-product twin')
    parser.add_argument(
        '--protocol',
        choices=list(rb.ATTACK_PROTOCOLS),
        default='default',
        help=f'defaults of the options below: {presets}')
    parser.add_argument(
        '--attacks', nargs='+', choices=rb.ATTACKS, help='attacks to run')
    parser.add_argument('--norm', choices=rb.NORMS, help='threat model')
    parser.add_argument(
        '--epsilons',
        nargs='+',
        type=epsilon,
        help='radii: 0-255 levels for linf (4 = 4/255), 0-1 for l2')
    parser.add_argument(
        '--steps',
        nargs='+',
        type=cli.positive_int,
        help='steps of the iterative attacks')
    parser.add_argument(
        '--step-size',
        type=cli.positive_float,
        help='step, in eps\'s unit (default: the protocol\'s)')
    parser.add_argument(
        '--random-start',
        action='store_true',
        help='start at a random point of the ball, seeded per image')
    parser.add_argument(
        '--adaptive',
        action='store_true',
        help='differentiate through the relevance m too (adaptive attack)')
    parser.add_argument(
        '--labels',
        choices=rb.LABELS,
        help='what the loss attacks: the ground truth, or the clean '
        'prediction (default: the protocol\'s)')
    parser.add_argument(
        '--max-images',
        type=cli.positive_int,
        help='attack only the first N images')
    parser.add_argument(
        '--batch-size',
        type=cli.positive_int,
        help='images attacked together (default: the config\'s test batch)')
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the random start')
    cli.add_work_dir(parser, 'work_dirs/adversarial')
    cli.add_allow_partial(parser)
    cli.add_paired_test(parser)
    parser.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    cli.add_cfg_options(parser)
    cli.add_launcher(parser)
    args = parser.parse_args(argv)
    preset = rb.ATTACK_PROTOCOLS[args.protocol]
    args.attacks = args.attacks or list(preset.attacks)
    args.norm = args.norm or preset.norm
    args.epsilons = args.epsilons or list(preset.epsilons)
    args.steps = args.steps or [preset.steps]
    args.labels = args.labels or preset.labels
    if args.norm == 'linf' and args.step_size is None:
        args.step_size = preset.step_size
    if args.norm == 'l2' and args.step_size is None and preset.step_size:
        parser.error('argument --step-size: give the L2 step (0-1 scale); '
                     f'the {args.protocol} protocol\'s is in L-inf levels')
    args.step_ratio = preset.step_ratio if args.step_size is None else None
    args.cells = attack_cells(args, False)  # checks them
    args.specs = cli.models_of(parser, args)
    names = [s.name for s in args.specs]
    args.elliptical = rb.elliptical_models(args.specs, args.cfg_options)
    if args.adaptive and not any(args.elliptical.values()):
        parser.error('argument --adaptive: no model has an elliptical layer '
                     f'({", ".join(names)}), so there is no relevance m to '
                     'differentiate through; drop --adaptive.')
    args.notes = fitting_models(parser, args.specs, args.cfg_options,
                                args.allow_partial)
    return args


def attack_cells(args: argparse.Namespace, adaptive: bool) -> List[rb.Attack]:
    """The attack cells of the command line (:func:`rb.attack_cells`)."""
    return rb.attack_cells(args.attacks, args.norm, args.epsilons, args.steps,
                           args.step_size, args.step_ratio, args.random_start,
                           adaptive, args.labels, args.seed)


@cli.tool_main
def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Run the grid; return the JSON data of the results."""
    import os.path as osp

    from mmengine.dist import is_main_process
    args = parse_args(argv)
    with process_group(cli.launcher_of(args)) as launch:
        cells = rb.model_cells(
            args.elliptical, args.cells,
            attack_cells(args, True) if args.adaptive else [])
        store = rb.run_cells(
            args.specs,
            cells,
            osp.join(args.work_dir, 'adversarial.json'),
            args.work_dir,
            seed=args.seed,
            max_images=args.max_images,
            cfg_options=args.cfg_options,
            quiet=not args.verbose,
            per_class=True,
            launch_options=launch,
            batch_size=args.batch_size,
            settings=rb.attack_settings(args.norm, args.step_size,
                                        args.step_ratio, args.random_start,
                                        args.labels))
        if is_main_process():
            text = rb.write_attack_report(store, [s.name for s in args.specs],
                                          args.work_dir, args.baseline,
                                          args.resamples, args.bootstrap_seed,
                                          args.arms)
            print(text + note_partial_loads(f'{args.work_dir}/adversarial.md',
                                            args.notes))
            print(f'Results in {args.work_dir}/'
                  'adversarial.{json,md,csv,png}')
    return store.data


if __name__ == '__main__':
    main()
