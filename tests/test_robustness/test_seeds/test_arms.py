"""Arms (several training runs of one model name): run names, the arm
figures, the hierarchical paired bootstrap and Welch's interval against
independent computations, the verdict words, old stores, bad input."""
import argparse
import json

import numpy as np
import pytest
from arm_oracles import (CELLS, as_lists, hierarchical_by_hand, runs_of,
                         synthetic_store)
from scipy.stats import ttest_ind

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.robustness.attacks.report import write_attack_report
from mmseg_elliptical.robustness.attacks.verdicts import attack_verdicts
from mmseg_elliptical.robustness.corruption.report import \
    write_robustness_report
from mmseg_elliptical.robustness.corruption.verdicts import corruption_verdicts
from mmseg_elliptical.robustness.grid.store import ResultStore
from mmseg_elliptical.robustness.statistics.bootstrap import (
    hierarchical_bootstrap, paired_bootstrap)
from mmseg_elliptical.robustness.statistics.worst import greedy_worst_case
from mmseg_elliptical.utils.arguments import add_models, models_of
from mmseg_elliptical.utils.config import arms_of, run_names


def test_run_names():
    assert run_names(['e', 'd']) == ['e', 'd']  # old command lines
    assert run_names(['e', 'e', 'd', 'e']) == ['e#0', 'e#1', 'd', 'e#2']
    assert arms_of(['e', 'e', 'd'], ['e#0', 'e#1', 'd']) == {
        'e': ['e#0', 'e#1'],
        'd': ['d']
    }
    with pytest.raises(ValueError, match='repeat'):
        run_names(['e', 'e', 'e#0'])


def test_hierarchical_bootstrap_against_a_computation_by_hand():
    rng = np.random.default_rng(0)
    a = as_lists(runs_of(rng, [0.5, 0.6, 0.55], images=9))
    b = as_lists(runs_of(rng, [0.5, 0.45], images=9))
    got = hierarchical_bootstrap(a, b, resamples=60, seed=5)
    want = hierarchical_by_hand(a, b, 60, 5)
    for key in ('difference', 'low', 'high'):
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-9), key
    for mine, theirs in zip(got['values'], want['values']):
        assert mine == pytest.approx(theirs, rel=1e-9)
    assert got['runs'] == [3, 2] and got['images'] == 9
    # Welch's t interval over the run-level values is scipy's.
    ci = ttest_ind(*want['values'], equal_var=False).confidence_interval(0.95)
    assert got['welch'] == pytest.approx(dict(low=ci.low, high=ci.high))
    assert got['zero_inside'] == (
        want['low'] <= 0 <= want['high'] or ci.low <= 0 <= ci.high)
    # Below 30 images: the interval, no verdict.
    assert not got['reliable']
    assert got['verdict'] == 'not reliable below 30 images (9): no verdict'


def test_one_run_per_arm_is_todays_paired_bootstrap():
    rng = np.random.default_rng(1)
    a, b = (as_lists(runs_of(rng, [q])) for q in (0.6, 0.5))
    today = paired_bootstrap(a[0], b[0], 300, 7)
    arms = hierarchical_bootstrap(a, b, 300, 7)
    for key in ('difference', 'low', 'high', 'zero_inside', 'verdict',
                'reliable'):
        assert arms[key] == today[key], key
    assert arms['welch'] is None and arms['runs'] == [1, 1]
    assert 'one run against one run' in arms['verdict']


def test_a_seed_outlier_one_run_differs_three_runs_do_not():
    """Run 0 of the arm is far better than the baseline's run 0: one run
    per arm says 0 outside; its other two runs are worse than the
    baseline's: three runs per arm say 0 inside."""
    rng = np.random.default_rng(2)
    a = as_lists(runs_of(rng, [0.8, 0.42, 0.4]))
    b = as_lists(runs_of(rng, [0.5, 0.52, 0.48]))
    one = hierarchical_bootstrap(a[:1], b[:1], 300, 0)
    assert not one['zero_inside'] and one['difference'] > 0
    assert one['verdict'].startswith('0 outside: one run against one run')
    two = hierarchical_bootstrap(a[:2], b, 300, 0)  # the smaller arm's
    assert not two['reliable'] and two['verdict'].endswith(
        ': 2 / 3 runs: too few for a verdict across seeds')
    three = hierarchical_bootstrap(a, b, 300, 0)
    assert three['zero_inside'] and three['reliable']
    assert three['verdict'] == ("0 inside (the bootstrap's or Welch's "
                                'interval): no evidence that the arms differ '
                                '(3 runs)')


def test_arms_of_unequal_size_are_named_so():
    """Two runs against one: the verdict names both counts and says an arm
    of one run has no seed variation (it said "one run per arm")."""
    rng = np.random.default_rng(4)
    a = as_lists(runs_of(rng, [0.6, 0.62]))
    b = as_lists(runs_of(rng, [0.5]))
    for x, y, counts in ((a, b, '2 / 1'), (b, a, '1 / 2')):
        r = hierarchical_bootstrap(x, y, 200, 0)
        assert r['runs'] == [int(c) for c in counts.split(' / ')]
        assert not r['reliable'] and r['welch'] is None
        assert r['verdict'].endswith(
            f': {counts} runs: an arm of one run has no seed-to-seed '
            'variation to measure: no verdict across seeds'), r['verdict']
        assert 'one run per arm' not in r['verdict']


def test_both_say_0_outside():
    rng = np.random.default_rng(3)
    a = as_lists(runs_of(rng, [0.8, 0.78, 0.82]))
    b = as_lists(runs_of(rng, [0.5, 0.52, 0.48]))
    one = hierarchical_bootstrap(a[:1], b[:1], 300, 0)
    three = hierarchical_bootstrap(a, b, 300, 0)
    assert not one['zero_inside'] and not one['reliable']
    assert not three['zero_inside'] and three['reliable']
    assert three['verdict'] == (
        '0 outside (both intervals): the arms differ beyond the variation '
        'of these 3 runs and the test images')
    assert three['welch']['low'] > 0 and three['low'] > 0


def test_only_welch_excludes_0_is_no_evidence():
    """Arm a is perfect on 2 of 40 images, else as the baseline; each arm's
    3 runs differ by a few pixels on 10 other images. Welch's interval over
    the runs excludes 0 (the runs agree closely); the bootstrap over images
    does not (a resample without those 2 images shows no gain): no
    evidence that the arms differ, since a difference needs both."""
    rng = np.random.default_rng(0)
    union = rng.integers(20, 60, size=(40, 4))
    half = (union * 0.5).astype(np.int64)

    def run(better: bool, k: int) -> list:
        inter = half.copy()
        if better:
            inter[:2] = union[:2]
        inter[10:20, 0] += 2 * k  # run-to-run spread
        return [(inter, union)]

    a = [run(True, k) for k in range(3)]
    b = [run(False, k) for k in range(3)]
    got = hierarchical_bootstrap(a, b, 1000, 0)
    want = hierarchical_by_hand(a, b, 1000, 0)
    assert want['low'] < 0 < want['high']
    assert got['low'] == pytest.approx(want['low'], rel=1e-9)
    ci = ttest_ind(*want['values'], equal_var=False).confidence_interval(0.95)
    assert 0 < ci.low and got['welch'] == pytest.approx(
        dict(low=ci.low, high=ci.high))
    assert got['zero_inside'] and got['reliable']
    assert got['verdict'] == ("0 inside (the bootstrap's or Welch's "
                              'interval): no evidence that the arms differ '
                              '(3 runs)')


def test_corruption_report_of_arms(tmp_path):
    """The arms' figures are the mean and sample sd of the runs' own
    numbers; the store gains a top-level ``arms`` beside ``models`` and
    ``summary``, with the hierarchical test of the arm against the
    baseline arm (the same as the bootstrap called directly)."""
    rng = np.random.default_rng(4)
    runs = dict(
        ell=runs_of(rng, [0.6, 0.55, 0.65]), dot=runs_of(rng, [0.5, 0.5]))
    store = synthetic_store(tmp_path, runs)
    names = list(store.data['models'])
    assert names == ['ell#0', 'ell#1', 'ell#2', 'dot#0', 'dot#1']
    arms = dict(ell=names[:3], dot=names[3:])
    text = write_robustness_report(
        corruption_verdicts(
            store,
            names, ['fog'], [1, 5],
            'mIoU',
            'dot',
            resamples=100,
            arms=arms), str(tmp_path))
    with open(tmp_path / 'grid.json') as f:
        data = json.load(f)
    assert {'models', 'summary', 'arms'} <= set(data)
    ell = data['arms']['ell']
    assert ell['runs'] == names[:3] and ell['baseline'] == 'dot'
    clean = [store.get(n, 'clean')['mIoU'] for n in names[:3]]
    fig = ell['figures']['P']
    assert fig['runs'] == clean
    assert fig['mean'] == pytest.approx(np.mean(clean))
    assert fig['sd'] == pytest.approx(np.std(clean, ddof=1))
    mpc = [
        np.mean([store.get(n, k)['mIoU'] for k in CELLS[1:]])
        for n in names[:3]
    ]
    assert ell['figures']['mPC']['mean'] == pytest.approx(np.mean(mpc))
    assert ell['figures']['mPC']['sd'] == pytest.approx(np.std(mpc, ddof=1))
    # Each run's CE divides by the baseline arm's first run.
    assert data['summary']['dot#0']['mCE'] == pytest.approx(1)
    want = hierarchical_bootstrap(
        as_lists(runs['ell'], CELLS[1:]), as_lists(runs['dot'], CELLS[1:]),
        100, 0)
    got = ell['paired']['mPC']
    assert {k: got[k] for k in ('low', 'high', 'difference')} == \
        {k: want[k] for k in ('low', 'high', 'difference')}
    assert got['runs'] == [3, 2] and set(got['welch']) == {'low', 'high'}
    assert data['arms']['dot']['paired'] is None
    assert f'{fig["mean"]:.2f} +- {fig["sd"]:.2f} (3 runs)' in text
    assert 'Hierarchical paired bootstrap over 40 images and 3 / 2 runs' \
        in text
    assert 'a real difference' not in text
    assert text.index('Hierarchical paired bootstrap') < text.index(
        '## Run by run') < text.index('dot#0')


def test_attack_report_of_arms(tmp_path):
    rng = np.random.default_rng(5)
    cells = ['clean', 'pgd/linf/4/10', 'segpgd/linf/4/10']
    runs = dict(
        ell=runs_of(rng, [0.6, 0.5, 0.55], cells),
        dot=runs_of(rng, [0.5, 0.45, 0.5], cells))
    store = synthetic_store(tmp_path, runs, dict(norm='linf'))
    names = list(store.data['models'])
    arms = dict(ell=names[:3], dot=names[3:])
    text = write_attack_report(
        attack_verdicts(store, names, 'dot', resamples=50, arms=arms),
        str(tmp_path))
    ell = store.data['arms']['ell']
    worst = [store.data['summary'][n]['worst']['4']['mIoU'] for n in names[:3]]
    assert ell['figures']['worst/4']['mean'] == pytest.approx(np.mean(worst))
    assert ell['figures']['worst/4']['sd'] == pytest.approx(
        np.std(worst, ddof=1))
    assert set(ell['paired']) == {'clean', 'worst/4', 'worst_mean'}
    # SEA's worst case of each run, then the hierarchical test.
    want = hierarchical_bootstrap(
        *[[[greedy_worst_case([r[k] for k in cells[1:]]).areas]
           for r in runs[a]] for a in ('ell', 'dot')], 50, 0)
    assert ell['paired']['worst/4']['low'] == want['low']
    assert ell['paired']['worst/4']['runs'] == [3, 3]
    assert '## Arms' in text and '(3 runs)' in text
    # The arms' verdicts open the report; the run-by-run tests against the
    # baseline arm's first run come below them.
    arm_line = text.index('- ell - dot, worst/4 mIoU:')
    run_line = text.index('- ell#1 - dot#0, worst case, eps 4:')
    assert text.index('# Adversarial') < arm_line < text.index(
        '## Run by run') < text.index('## Against the baseline') < run_line


def test_stores_written_before_arms_still_report(tmp_path):
    """A store without ``arms`` (one run per model, plain names) reopens
    and reports as before, the arms added as arms of one run."""
    rng = np.random.default_rng(6)
    synthetic_store(tmp_path,
                    dict(ell=runs_of(rng, [0.6]), dot=runs_of(rng, [0.5])))
    assert 'arms' not in json.load(open(tmp_path / 'grid.json'))
    old = ResultStore(str(tmp_path / 'grid.json'), {})
    text = write_robustness_report(
        corruption_verdicts(
            old, ['ell', 'dot'], ['fog'], [1, 5], 'mIoU', 'dot',
            resamples=100), str(tmp_path))
    paired = old.data['summary']['ell']['paired']['clean']
    arm = old.data['arms']['ell']['paired']['clean']
    assert (arm['low'], arm['high']) == (paired['low'], paired['high'])
    assert old.data['arms']['ell']['figures']['P']['sd'] is None
    assert '## Arms' not in text and '+-' not in text


def write_model(tmp_path, name, dataset='DemoShapes', classes=4):
    import torch
    config = tmp_path / f'{name}.py'
    config.write_text(f'test_dataloader = dict(dataset=dict(type={dataset!r}, '
                      f"data_root='data'))\nmodel = dict(decode_head=dict("
                      f'num_classes={classes}))\n')
    ckpt = tmp_path / f'{name}.pth'
    torch.save({}, str(ckpt))
    return [str(config), str(ckpt)]


def parse(argv):
    parser = argparse.ArgumentParser()
    add_models(parser, baseline='the baseline')
    args = parser.parse_args(argv)
    return models_of(parser, args), args


def test_models_of_forms_arms(tmp_path):
    a, b, c, d = (write_model(tmp_path, n) for n in 'abcd')
    specs, args = parse([*a, *b, *c, *d, '--names', 'e', 'e', 'dot', 'dot'])
    assert [s.name for s in specs] == ['e#0', 'e#1', 'dot#0', 'dot#1']
    assert args.arms == dict(e=['e#0', 'e#1'], dot=['dot#0', 'dot#1'])
    assert args.baseline == 'dot'
    specs, args = parse([*a, *b, '--names', 'e', 'dot'])  # as before
    assert [s.name for s in specs] == ['e', 'dot'] and args.baseline == 'dot'
    # Without --names, the same config twice is one arm.
    specs, args = parse([a[0], a[1], a[0], b[1]])
    assert args.arms == dict(a=['a#0', 'a#1'])
    assert args.baseline is None


@pytest.mark.parametrize(
    'extra, message',
    [(['--names', 'e', 'e', 'dot', '--baseline', 'x'], "'x' is none of"),
     (['--names', 'e', 'e', 'dot', '--same'], 'gives checkpoint'),
     (['--names', 'e', 'e', 'dot', '--other'], 'differ in dataset')])
def test_bad_arms_are_refused(tmp_path, capsys, extra, message):
    a, b, c = (write_model(tmp_path, n) for n in 'abc')
    if '--same' in extra:
        b = [b[0], a[1]]
    if '--other' in extra:
        b = write_model(tmp_path, 'other', classes=7)
    extra = [
        x for x in extra
        if not x.startswith('--') or x == '--names' or x == '--baseline'
    ]
    with pytest.raises(SystemExit) as e:
        parse([*a, *b, *c, *extra])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_the_verdict_lines_name_each_runs_training_seed(tmp_path):
    """Seeds read from the checkpoints' paths (compare_seeds.py's
    ``NAME/seedS/``) in the verdict lines; none where one is unknown."""
    from mmseg_elliptical.robustness.seeds.arms import seeds_of
    from mmseg_elliptical.robustness.seeds.report import verdict_lines
    rng = np.random.default_rng(8)
    runs = dict(
        ell=runs_of(rng, [0.6, 0.5, 0.55]), dot=runs_of(rng, [0.5, 0.45]))
    store = synthetic_store(tmp_path, runs)
    paths = {
        'ell#0': 'w/ell/seed2/iter_10.pth',
        'ell#1': 'w/ell/seed_0/iter_10.pth',
        'ell#2': '/x/seed-11/iter_10.pth',
        'dot#0': 'w/dot/seed0/iter_10.pth',
        'dot#1': 'w/dot/seed1/latest.pth'
    }
    for run, path in paths.items():
        store.data['models'][run]['checkpoint'] = path
    arms = dict(ell=['ell#0', 'ell#1', 'ell#2'], dot=['dot#0', 'dot#1'])
    by_arm = attack_verdicts(
        store, list(paths), 'dot', resamples=20, arms=arms).arms
    assert by_arm['ell']['seeds'] == {'ell#0': 2, 'ell#1': 0, 'ell#2': 11}
    assert by_arm['dot']['seeds'] == {'dot#0': 0, 'dot#1': 1}
    lines = verdict_lines(by_arm)
    assert lines and all('3 / 2 runs (training seeds 2, 0, 11 / 0, 1),' in line
                         for line in lines
                         if line.startswith('- ell - dot, ')), lines
    store.data['models']['dot#1']['checkpoint'] = 'w/dot/reseeded.pth'
    assert 'dot#1' not in seeds_of(store, arms, by_arm)['dot']['seeds']
    assert 'training seeds' not in ' '.join(verdict_lines(by_arm))
