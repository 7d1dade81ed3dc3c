"""``tools/misc/test_times.py``: the suite's time per folder from pytest's
JUnit XML, against sums computed here; a missing report is one line."""
import pytest
from processes import load_tool

CASES = [
    ('tests.test_robustness.test_grid.test_attack_grid', 3.5),
    ('tests.test_robustness.test_grid.test_attack_grid', 1.5),
    ('tests.test_analysis.test_evidence.test_collapse', 2.0),
    ('tests.test_import_layers', 0.25),
]


def write_report(path):
    cases = ''.join(f'<testcase classname="{c}" name="t{i}" time="{s}"/>'
                    for i, (c, s) in enumerate(CASES))
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}'
                    '</testsuite></testsuites>')


def test_time_per_folder(tmp_path, capsys):
    tool = load_tool('misc/test_times.py')
    write_report(tmp_path / 'r.xml')
    times = tool.folder_times(str(tmp_path / 'r.xml'), depth=2)
    assert times == {
        'test_robustness/test_grid': (2, 5.0),
        'test_analysis/test_evidence': (1, 2.0),
        'test_import_layers': (1, 0.25)
    }
    deeper = tool.folder_times(str(tmp_path / 'r.xml'), depth=3)
    assert deeper['test_robustness/test_grid/test_attack_grid'] == (2, 5.0)
    tool.main([str(tmp_path / 'r.xml')])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == '| tests/test_robustness/test_grid | 2 | 5 | 69 % |'
    assert lines[-1] == '| all | 4 | 7 | 100 % |'


def test_a_missing_report_is_one_line(tmp_path, capsys):
    tool = load_tool('misc/test_times.py')
    with pytest.raises(SystemExit) as e:
        tool.main([str(tmp_path / 'none.xml')])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('test_times: cannot read') and err.count('\n') == 1
