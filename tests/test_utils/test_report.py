"""``utils/report.py``: the markdown table and the report files the
analysis tools write."""
import json
import os.path as osp

from mmseg_elliptical.utils.report import markdown_table, pyplot, write_report


def test_report_writer(tmp_path):
    table = markdown_table(
        ['model', 'n', 'score'],
        [['a', 3, 1.23456], ['b', None, float('nan')]],
        spec='.2f',
        left=1)
    assert table == ('| model | n | score |\n|---|---:|---:|\n'
                     '| a | 3 | 1.23 |\n| b | - | - |\n')
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
