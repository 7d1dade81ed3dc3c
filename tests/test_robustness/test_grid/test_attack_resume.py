"""An attack grid with an APGD cell and a transfer cell, interrupted (Ctrl-C,
the cheapest interruption the grid tests use) while a cell runs and run
again: the same cells, to the last stored area, as one uninterrupted run,
and the finished cells kept as they were."""
import json

import numpy as np
import pytest
from processes import load_tool

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.robustness.grid import loop as grid_loop
from mmseg_elliptical.robustness.grid import run as grid_run
from mmseg_elliptical.robustness.grid.loop import CorruptionGridLoop

ARGS = [
    '--names', 'ell', 'dot', '--attacks', 'apgd-mce', '--epsilons', '4',
    '--steps', '4', '--max-images', '2', '--transfer', 'ell'
]
#: Every cell, in the order the grid runs them.
CELLS = [('ell', 'clean'), ('ell', 'apgd-mce/linf/4/4'), ('dot', 'clean'),
         ('dot', 'apgd-mce/linf/4/4'), ('dot', 'apgd-mce@ell/linf/4/4')]


@pytest.fixture(scope='module')
def whole(demo_models, tmp_path_factory):
    """One uninterrupted run: its work dir and results."""
    work = tmp_path_factory.mktemp('whole')
    data = load_tool('analysis_tools/adversarial.py').main(
        demo_models + ARGS + ['--work-dir', str(work)])
    return work, json.loads(json.dumps(data))


def areas(work, name, key) -> dict:
    with np.load(work / 'areas' / name / f'{key}.npz') as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize('stop', [3, 4])
def test_interrupted_apgd_and_transfer_grid_ends_with_the_same_cells(
        stop, demo_models, whole, tmp_path, monkeypatch):
    """Interrupted while the ``stop + 1``-th cell is being stored (dot's
    APGD cell, then its transfer cell): the rerun computes only the rest."""
    tool = load_tool('analysis_tools/adversarial.py')
    argv = demo_models + ARGS + ['--work-dir', str(tmp_path)]
    record = grid_run.record_cell
    done = []

    def interrupted(*args):
        if len(done) == stop:
            raise KeyboardInterrupt
        record(*args)
        done.append((args[1], args[5]))

    monkeypatch.setattr(grid_run, 'record_cell', interrupted)
    with pytest.raises(SystemExit) as end:  # one line, not a traceback
        tool.main(argv)
    assert end.value.code == 130
    monkeypatch.undo()
    assert done == CELLS[:stop]
    partial = json.loads((tmp_path / 'adversarial.json').read_text())
    ran = []
    run = CorruptionGridLoop.run

    def counting(self):
        ran.extend(grid_loop.key_of(c) for c in self.cells)
        return run(self)

    monkeypatch.setattr(CorruptionGridLoop, 'run', counting)
    data = tool.main(argv)
    assert ran == [key for _, key in CELLS[stop:]]
    work, want = whole
    for name, key in CELLS:
        got, cell = data['models'][name]['cells'][key], want['models'][name][
            'cells'][key]
        for metric in ('mIoU', 'aAcc', 'mAcc', 'max_linf', 'max_l2'):
            assert got.get(metric) == cell.get(metric), (name, key, metric)
        a, b = areas(tmp_path, name, key), areas(work, name, key)
        assert a.keys() == b.keys() and {'intersect', 'union'} <= a.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), (name, key, k)
    for name, key in CELLS[:stop]:  # kept, not recomputed
        assert data['models'][name]['cells'][key] == \
            partial['models'][name]['cells'][key]
    assert 0 < data['models']['dot']['cells'][CELLS[4][1]]['max_linf'] <= 4
