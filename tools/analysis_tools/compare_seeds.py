"""Train configs on several seeds and compare them (``make compare``).

    python tools/analysis_tools/compare_seeds.py CONFIG [CONFIG ...] \\
        [--names ...] [--seeds 0 1 2] [--work-dir work_dirs/compare] \\
        [--cfg-options ...]

Runs that finished before are kept, interrupted ones resume; see
:mod:`mmseg_elliptical.analysis.seed_sweep`.
"""
import argparse
import os.path as osp
import time
from typing import Dict, Optional, Sequence

from mmseg_elliptical.analysis.seed_sweep import compare_seeds


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='Train configs on several seeds (skipping runs that are '
        'done) and compare their validation metrics: mean and standard '
        'deviation per model, and mIoU over iterations.')
    parser.add_argument('configs', nargs='+', help='config files')
    parser.add_argument(
        '--names',
        nargs='+',
        help='one name per config (default: the config file names)')
    parser.add_argument(
        '--seeds',
        nargs='+',
        type=int,
        default=[0, 1, 2],
        help='seeds of every config (default: 0 1 2)')
    parser.add_argument(
        '--work-dir',
        default='work_dirs/compare',
        help='root of the runs and of the outputs')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        default=[],
        help='key=value options of every run, as in tools/train.py')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Train what is missing, write the report; return the summary."""
    args = parse_args(argv)
    names = args.names or [
        osp.splitext(osp.basename(c))[0] for c in args.configs
    ]
    start = time.perf_counter()
    try:
        summary, _, table, written = compare_seeds(
            args.configs,
            names,
            args.seeds,
            args.work_dir,
            args.cfg_options,
            log=lambda s: print(s, flush=True))
    except ValueError as e:
        raise SystemExit(str(e))
    print(f'\nFinal validation metrics, mean ± standard deviation over '
          f'seeds {" ".join(map(str, args.seeds))} '
          f'({(time.perf_counter() - start) / 60:.1f} min):\n\n{table}')
    print('\n'.join(written))
    return summary


if __name__ == '__main__':
    main()
