"""The test suite's time per folder, from pytest's JUnit XML
(``make test-times``): a markdown table of each folder's tests, their
summed time and its share, so the suite's cost stays visible.

    python tools/misc/test_times.py work_dirs/test-times.xml [--depth 2]
"""
import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Dict, Tuple


def folder_times(path: str, depth: int = 2) -> Dict[str, Tuple[int, float]]:
    """``{folder: (tests, seconds)}`` of a JUnit XML report, the folder cut
    to ``depth`` parts under ``tests/`` (the module for a file nearer)."""
    out: Dict[str, list] = defaultdict(lambda: [0, 0.])
    for case in ET.parse(path).getroot().iter('testcase'):
        parts = case.get('classname', '').split('.')
        if parts and parts[0] == 'tests':
            parts = parts[1:]
        modules = [p for p in parts if p.startswith('test_')]
        key = '/'.join(modules[:depth]) or '(root)'
        out[key][0] += 1
        out[key][1] += float(case.get('time') or 0.)
    return {k: (n, s) for k, (n, s) in out.items()}


def markdown(times: Dict[str, Tuple[int, float]]) -> str:
    """The table, slowest folder first, with the total."""
    total = sum(s for _, s in times.values()) or 1.
    rows = ['| folder | tests | seconds | share |', '|---|---:|---:|---:|']
    for key, (n, s) in sorted(times.items(), key=lambda kv: -kv[1][1]):
        rows.append(
            f'| tests/{key} | {n} | {s:.0f} | {100 * s / total:.0f} % |')
    count = sum(n for n, _ in times.values())
    rows.append(f'| all | {count} | {total:.0f} | 100 % |')
    return '\n'.join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('report', help='pytest --junitxml file')
    parser.add_argument(
        '--depth',
        type=int,
        default=2,
        help='folder levels under tests/ (default: 2)')
    args = parser.parse_args(argv)
    try:
        times = folder_times(args.report, args.depth)
    except (OSError, ET.ParseError) as e:
        parser.exit(2, f'test_times: cannot read {args.report}: {e}\n')
    print(markdown(times))


if __name__ == '__main__':
    sys.exit(main())
