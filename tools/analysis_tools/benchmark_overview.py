#!/usr/bin/env python
"""One table of earlier benchmark runs (docs/benchmark.md's speed table).

Reads the ``benchmark.json`` that ``benchmark.py`` wrote in each folder and
writes, per run, config, size and baseline, the time ratios (median and
interquartile range of the per-round ratios) and the peak memory ratios of
the inference and the training step to ``OUT_DIR/overview.md``.

Example::

    python tools/analysis_tools/benchmark_overview.py \\
        work_dirs/speed/vit-t_b1 work_dirs/speed/mit-b0 \\
        --work-dir work_dirs/speed
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import json
import os.path as osp
from typing import Optional, Sequence

from mmseg_elliptical.utils import write_report
from mmseg_elliptical.utils.arguments import add_work_dir


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s DIR [DIR ...] [options]')
    p.add_argument(
        'runs',
        nargs='+',
        metavar='DIR',
        help='folders of benchmark.py runs (each with its benchmark.json)')
    add_work_dir(p, 'work_dirs/benchmark')
    args = p.parse_args(argv)
    missing = [
        d for d in args.runs if not osp.isfile(osp.join(d, 'benchmark.json'))
    ]
    if missing:
        p.error(f'argument DIR: no benchmark.json in {", ".join(missing)}')
    for run in args.runs:
        path = osp.join(run, 'benchmark.json')
        try:
            found = load(path)
        except ValueError as e:  # JSON that does not parse
            p.error(f'argument DIR: {path} is no JSON file ({e})')
        if not isinstance(found, dict) or not {'meta', 'ratios'} <= set(found):
            p.error(f'argument DIR: {path} is no benchmark.py report (no '
                    '"meta" and "ratios")')
    return args


def load(path: str):
    """A JSON file's data."""
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[str]:
    """Write the table; return its markdown."""
    args = parse_args(argv)
    if check_only:
        return None
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.benchmark.reporting import overview_table
    text = overview_table(
        [load(osp.join(d, 'benchmark.json')) for d in args.runs])
    files = write_report(args.work_dir, 'overview', markdown=text)
    print(f'{text}\nWrote {", ".join(files)}')
    return text


if __name__ == '__main__':
    main()
