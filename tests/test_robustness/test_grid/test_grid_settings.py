"""The corruption grid's store refuses every setting a cell depends on,
and every field of its summary, the groups' rmCE included, equals the
computation by hand."""
import pytest
from evidence_oracles import robustness_by_hand
from processes import load_tool, refused

from mmseg_elliptical.robustness.grid.run import run_grid
from mmseg_elliptical.robustness.grid.store import GridError
from mmseg_elliptical.robustness.statistics.summary import robustness_summary

CORR = ['gaussian_noise', 'shot_noise', 'fog', 'contrast']


def test_every_summary_field_against_the_computation_by_hand():
    import numpy as np
    rng = np.random.default_rng(3)
    cells = {}
    for name in ('a', 'base'):
        cells[name] = {'clean': dict(mIoU=float(rng.uniform(60, 80)))}
        for c in CORR:
            for s in (1, 3):
                cells[name][f'{c}/{s}'] = dict(mIoU=float(rng.uniform(5, 60)))
    got = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'base')
    want = robustness_by_hand(cells, CORR, [1, 3], 'mIoU', 'base')
    for name in cells:
        assert sorted(got[name]['groups']) == sorted(want[name]['groups'])
        for group, values in want[name]['groups'].items():
            for key in ('mPC', 'mCE', 'rmCE'):
                assert got[name]['groups'][group][key] == pytest.approx(
                    values[key]), (name, group, key)
        for key in ('P', 'mPC', 'rPC', 'mCE', 'rmCE', 'CE', 'rCE'):
            assert got[name][key] == pytest.approx(want[name][key]), key


def test_a_rerun_under_other_settings_is_refused(demo_models, tmp_path,
                                                 monkeypatch, capsys):
    """Every setting of a cell that is not in its key (images, corruption
    seed, config options, per-class IoU) refuses the stored results."""
    tool = load_tool('analysis_tools/robustness.py')
    argv = demo_models[:2] + [
        '--corruptions', 'fog', '--severities', '1', '--work-dir',
        str(tmp_path)
    ]
    tool.main(argv + ['--max-images', '1'])

    def forbidden(*args, **kwargs):
        raise AssertionError('a cell ran')

    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    tool.main(argv + ['--max-images', '1'])  # the same: resumed, no cell
    for extra in (['--max-images', '2'], [], [
            '--max-images', '1', '--seed', '1'
    ], ['--max-images', '1', '--cfg-options', 'model.test_cfg.mode=whole']):
        assert 'settings' in refused(capsys, tool.main, argv + extra), extra
    with pytest.raises(GridError, match='settings'):
        run_grid([], ['fog'], [1], str(tmp_path), max_images=1, per_class=True)
