"""Old module paths of the analysis' rooms: each warns with its new path and
gives the new module; every old path in the table names a module that
exists."""
import importlib
import subprocess
import sys

import pytest

from mmseg_elliptical.analysis import MOVED


@pytest.mark.parametrize('old', sorted(MOVED))
def test_every_moved_path_names_a_module(old):
    new = importlib.import_module(MOVED[old])
    assert new.__name__ == MOVED[old]


def test_an_old_path_warns_and_is_the_new_module():
    """In a fresh interpreter: ``from old import name`` works, warns once
    naming the new path, and the module is the new one (not a copy)."""
    code = '\n'.join([
        'import warnings',
        'import mmseg_elliptical',
        'from mmseg_elliptical.analysis.robustness.verdicts import worst',
        'warnings.simplefilter("error", DeprecationWarning)',
        'try:',
        '    import mmseg_elliptical.analysis.robustness.worst',
        'except DeprecationWarning as e:',
        '    print("warned:", e)',
        'warnings.simplefilter("ignore", DeprecationWarning)',
        'from mmseg_elliptical.analysis.robustness.worst import '
        'greedy_worst_case',
        'print(greedy_worst_case is worst.greedy_worst_case)',
    ])
    proc = subprocess.run([sys.executable, '-W', 'ignore', '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert lines[-2] == (
        'warned: mmseg_elliptical.analysis.robustness.worst moved to '
        'mmseg_elliptical.analysis.robustness.verdicts.worst; the old path '
        'goes in the next release: import the new one.')
    assert lines[-1] == 'True'


def test_a_path_that_never_existed_still_fails():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module('mmseg_elliptical.analysis.robustness.nothing')
