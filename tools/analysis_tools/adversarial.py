"""Adversarial robustness of one or more segmentors, side by side.

Every model is attacked on the config's test images (PGD, SegPGD, CosPGD,
FGSM, and APGD with SEA's losses: ``apgd-mce``, ``apgd-mce-bal``,
``apgd-js``, and ``apgd-ce``, plain cross-entropy; L-inf or L2) at each
eps, through mmengine's runner and test loop, and each finished cell is
saved to ``<work-dir>/adversarial.json`` at once, so a rerun resumes.
With ``--launcher pytorch`` (``tools/dist_adversarial.sh``) or ``slurm``
(``tools/slurm_adversarial.sh``) every cell's images are split across the
processes and rank 0 writes. The report gives the mIoU per attack
and eps, the per-image worst case over the attacks, the means over eps and,
against ``--baseline``, a paired bootstrap over images. ``--adaptive`` lets
the gradient flow through the relevance ``m`` too: each model with
elliptical layers is attacked both ways (a model without them has no ``m``:
its plain attack is the adaptive one). ``--attacks square`` adds the query
attack (``--queries``), ``--transfer SOURCE`` evaluates every other model on
the images crafted on SOURCE, and ``--audit`` adds the cells of a
gradient-masking audit and its verdict per model. The worst case is SEA's
over every attack cell at each eps (docs/evidence.md). Outputs (in
``--work-dir``): ``adversarial.{json,md,csv,png}``, ``areas/`` and, with
``apgd-mce-bal``, ``class_weights.json`` (the training set's class weights,
counted once).

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/adversarial.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --baseline dot-product \\
        --protocol quick --work-dir work_dirs/adversarial
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
from typing import Dict, Optional, Sequence

from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.robustness.attacks import cells as attacks
from mmseg_elliptical.robustness.grid.protocols import (command_cells,
                                                        protocol_defaults)
from mmseg_elliptical.utils import arguments as cli
from mmseg_elliptical.utils.preflight import check_run


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and check the command line before any work (no torch); adds
    ``cells`` (the plain attack cells) and ``specs``."""
    presets = '; '.join(
        f'{k}: {p.description} ({p.passes()[0]} forward and {p.passes()[1]} '
        'backward passes per image and model)'
        for k, p in attacks.ATTACK_PROTOCOLS.items())
    audit = attacks.AUDIT_PRESET
    parser = argparse.ArgumentParser(
        description='Segmentors under white-box attacks, side by side.',
        usage='%(prog)s CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [options]')
    cli.add_models(
        parser,
        baseline='the model the paired test compares with, normally the '
        'dot-product twin')
    parser.add_argument(
        '--protocol',
        choices=list(attacks.ATTACK_PROTOCOLS),
        default='default',
        help=f'defaults of the options below: {presets}')
    parser.add_argument(
        '--attacks',
        nargs='+',
        choices=[*attacks.ATTACKS, *attacks.QUERY_ATTACKS],
        help='attacks to run (square: the query attack, L-inf, --queries)')
    parser.add_argument(
        '--queries',
        type=cli.positive_int,
        help='queries of the square attack per image (default: 100; the '
        f'audit\'s: {audit.queries})')
    parser.add_argument('--norm', choices=attacks.NORMS, help='threat model')
    parser.add_argument(
        '--epsilons',
        nargs='+',
        help='radii: 0-255 levels for linf (4, or 4/255 as in papers), 0-1 '
        'for l2')
    parser.add_argument(
        '--allow-small-eps',
        action='store_true',
        help='take an L-inf eps below 0.25 levels as written (refused by '
        'default: 0.03 is most likely 0.03 of the range, 7.65 levels)')
    parser.add_argument(
        '--allow-large-eps',
        action='store_true',
        help='take an L2 eps above 4 (0-1 scale) as written (refused by '
        'default: 8 is most likely 8/255)')
    parser.add_argument(
        '--steps',
        nargs='+',
        type=cli.positive_int,
        help='steps of the iterative attacks (APGD: its iterations, >= 4 '
        'for L-inf)')
    parser.add_argument(
        '--step-size',
        type=cli.positive_float,
        help='step, in eps\'s unit (default: the protocol\'s; APGD sets its '
        'own)')
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
        choices=attacks.LABELS,
        help='what the loss attacks: the ground truth, or the clean '
        'prediction (default: the protocol\'s)')
    parser.add_argument(
        '--transfer',
        metavar='SOURCE',
        help='also evaluate every other model on the adversarial images '
        'crafted on this model (a name of --names): cells '
        'ATTACK@SOURCE/NORM/EPS/STEPS')
    parser.add_argument(
        '--audit',
        action='store_true',
        help='the gradient-masking audit at its preset: also runs '
        f'{audit.sweep_attack} with --audit-sweep-steps iterations '
        'from the largest eps to 255 levels, doubled steps, FGSM, the square '
        f'attack (--queries, default {audit.queries}) and transfer '
        'from every other model on the same images; a table and a verdict '
        'per model (a budget below the preset is named in the verdict)')
    parser.add_argument(
        '--audit-sweep-steps',
        type=cli.positive_int,
        default=audit.sweep_steps,
        help='iterations of the audit\'s eps sweep (default: '
        f'{audit.sweep_steps})')
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
    try:
        protocol_defaults(args)
    except ConfigError as e:
        parser.error(str(e))
    args.cells = command_cells(args, False)  # checks them
    args.specs = cli.models_of(parser, args)
    check_run(parser, args, args.specs, __file__, store='adversarial.json')
    names = [s.name for s in args.specs]
    if args.transfer is not None and (args.transfer not in names
                                      or len(names) < 2):
        parser.error(f'argument --transfer: {args.transfer!r} is none of '
                     f'the models {names}, or there is no other model to '
                     'evaluate on its adversarial images.')
    args.parser = parser  # for the checks after the heavy imports
    return args


@cli.tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict]:
    """Run the grid; return the JSON data of the results (``check_only``:
    stop after the checks, ``tools/check_args.py``)."""
    args = parse_args(argv)
    from mmengine.dist import is_main_process

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine import (fitting_models, note_partial_loads,
                                         process_group)
    from mmseg_elliptical.robustness import attack_run
    attack_run.check_models(args.parser, args)
    args.notes = fitting_models(args.parser, args.specs, args.cfg_options,
                                args.allow_partial)
    if check_only:
        return None
    with process_group(cli.launcher_of(args)) as launch:
        store = attack_run.attack_grid(args, launch)
        if is_main_process():
            text = attack_run.attack_report(args, store)
            print(text + note_partial_loads(f'{args.work_dir}/adversarial.md',
                                            args.notes))
            print(f'Results in {args.work_dir}/'
                  'adversarial.{json,md,csv,png}')
    return store.data


if __name__ == '__main__':
    main()
