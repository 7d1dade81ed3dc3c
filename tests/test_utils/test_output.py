"""``utils/output.py``: the markdown table (prettytable's) and the report
files the analysis tools write."""
import json
import os.path as osp

import pytest

from mmseg_elliptical.utils.output import markdown_table, pyplot, write_report


def test_report_writer(tmp_path):
    table = markdown_table(
        ['model', 'n', 'score'],
        [['a', 3, 1.23456], ['b', None, float('nan')]],
        spec='.2f',
        left=1)
    assert table == ('| model | n | score |\n'
                     '| :-----|-: |-----: |\n'
                     '| a     | 3 |  1.23 |\n'
                     '| b     | - |     - |\n')
    fig, ax = pyplot().subplots()
    ax.plot([0, 1])
    files = write_report(
        str(tmp_path / 'out'),
        'r',
        data={'x': [1, 2]},
        markdown=table,
        table=(['a', 'b'], [[1, None]]),
        figure=fig)
    assert [osp.basename(f)
            for f in files] == ['r.json', 'r.md', 'r.csv', 'r.png']
    assert json.loads((tmp_path / 'out' / 'r.json').read_text()) == \
        {'x': [1, 2]}
    assert (tmp_path / 'out' / 'r.md').read_text() == table
    assert (tmp_path / 'out' / 'r.csv').read_text().splitlines() == \
        ['a,b', '1,']
    assert (tmp_path / 'out' / 'r.png').read_bytes()[:4] == b'\x89PNG'
    assert write_report(str(tmp_path / 'out'), 's') == []


def test_markdown_table_formats_and_alignment():
    table = markdown_table(
        ['name', 'kind', 'ms', 'ratio'],
        [['vit', 'train', 12.345, 1.0049], ['swin-t', 'infer', 7, None]],
        spec=['', '', '.1f', '.3f'],
        left=2)
    lines = table.splitlines()
    assert [c.strip() for c in lines[0].strip('|').split('|')] == \
        ['name', 'kind', 'ms', 'ratio']
    # Two label columns left-aligned (':---'), the numbers right ('---:').
    assert [c.strip()[0] + c.strip()[-1]
            for c in lines[1].strip('|').split('|')] == \
        [':-', ':-', '-:', '-:']
    assert [c.strip() for c in lines[2].strip('|').split('|')] == \
        ['vit', 'train', '12.3', '1.005']
    assert [c.strip() for c in lines[3].strip('|').split('|')] == \
        ['swin-t', 'infer', '7', '-']
    assert len({len(line) for line in lines}) == 1  # columns padded alike
    with pytest.raises(ValueError, match='2 formats for 4 columns'):
        markdown_table(['a', 'b', 'c', 'd'], [], spec=['', ''])
