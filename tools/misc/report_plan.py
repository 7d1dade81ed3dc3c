"""``make report``'s plan, printed at its start: the trainings still missing
and ``compare_models.py``'s sections, each with its estimate, and the whole
(:mod:`mmseg_elliptical.analysis.comparison.plan`). The steps then print the
time they took and the time left as they finish.

    python tools/misc/report_plan.py CKPT [CKPT ...] [--jobs N]
"""
import argparse
import importlib.util
import os
import os.path as osp
from typing import List, Optional, Sequence, Tuple

# plan.py by its path: importing the package would load mmseg and torch
# (about 15 s) before the plan is printed.
_spec = importlib.util.spec_from_file_location(
    'report_plan_steps',
    osp.join(
        osp.dirname(osp.abspath(__file__)), '..', '..', 'mmseg_elliptical',
        'analysis', 'comparison', 'plan.py'))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)
SECTION_SECONDS, TRAIN_SECONDS = plan.SECTION_SECONDS, plan.TRAIN_SECONDS
Countdown = plan.Countdown


def report_steps(checkpoints: Sequence[str],
                 jobs: int) -> List[Tuple[str, float]]:
    """The trainings of the missing checkpoints (``jobs`` at once), then
    the report's sections."""
    missing = [c for c in checkpoints if not osp.exists(c)]
    steps = []
    if missing:
        at_once = max(1, min(jobs, len(missing)))
        rounds = -(-len(missing) // at_once)
        steps.append((f'{len(missing)} of {len(checkpoints)} trainings '
                      f'({at_once} at once)', rounds * TRAIN_SECONDS))
    return steps + list(SECTION_SECONDS)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        'checkpoints', nargs='+', help='the runs\' checkpoints')
    parser.add_argument(
        '--jobs',
        type=int,
        default=os.cpu_count() or 1,
        help='trainings at once (default: one per core)')
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f'argument --jobs: {args.jobs} is not >= 1')
    Countdown(report_steps(args.checkpoints,
                           args.jobs)).announce('make report')


if __name__ == '__main__':
    main()
