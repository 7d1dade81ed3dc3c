"""Figures and CSVs of arms of several runs: the heatmaps, the attack curves
and the collapse curves draw each arm's mean (its runs as thin lines where
they are curves), the mean computed here independently; the arms' numbers
reach a CSV."""
import csv

import numpy as np
import pytest
from figure_checks import assert_legends_outside_data, grid_summary

from mmseg_elliptical.analysis.evidence.collapse import (collapse_figure,
                                                         write_collapse_report)
from mmseg_elliptical.robustness.attacks.report import (attack_curves,
                                                        write_attack_report)
from mmseg_elliptical.robustness.attacks.verdicts import attack_verdicts
from mmseg_elliptical.robustness.corruption.figure import heatmaps
from mmseg_elliptical.robustness.corruption.report import \
    write_robustness_report
from mmseg_elliptical.robustness.corruption.verdicts import corruption_verdicts
from mmseg_elliptical.robustness.seeds.means import arm_means, mean_tree
from mmseg_elliptical.robustness.seeds.report import arms_rows

ARMS = dict(ell=['ell#0', 'ell#1', 'ell#2'], dot=['dot'])
RUNS = [r for runs in ARMS.values() for r in runs]


def test_mean_tree_averages_leaf_by_leaf():
    trees = [
        dict(a=1.0, b=[2, None], c=dict(d=3.0), name='x', flag=True),
        dict(a=4.0, b=[5, 6], c=dict(d=6.5), name='y', flag=False),
    ]
    got = mean_tree(trees)
    assert got == dict(
        a=2.5, b=[3.5, None], c=dict(d=4.75), name='x', flag=True)
    # a run without an entry: None, not the other runs' mean
    assert mean_tree([dict(w=dict(m=1.0)),
                      dict(w=None)]) == dict(w=dict(m=None))


def test_heatmaps_draw_the_arm_means(tmp_path):
    corruptions, severities = ['gaussian_noise', 'snow'], [1, 5]
    summary = grid_summary(RUNS, corruptions, severities, tmp_path)
    drawn = arm_means(summary, ARMS)
    assert list(drawn) == ['ell (mean of 3 runs)', 'dot']
    fig = heatmaps(drawn, corruptions, severities)
    assert_legends_outside_data(fig)
    ell = fig.axes[0]
    assert ell.get_title().startswith('ell (mean of 3 runs)')
    texts = {
        (round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
        for t in ell.texts
    }
    for i, c in enumerate(corruptions):
        for j in range(len(severities)):
            mean = np.mean([summary[r]['grid'][c][j] for r in ARMS['ell']])
            assert texts[(i, j)] == f'{mean:.1f}'


def _attack_summary(clean, worst):
    return dict(
        clean=clean,
        series={'pgd/linf/5': {
            '1': clean - 10,
            '4': clean - 30
        }},
        worst={
            e: dict(mIoU=v, aAcc=50.0)
            for e, v in worst.items()
        },
        mean_over_eps={})


def test_attack_curves_draw_the_runs_thin_and_the_mean():
    summary = {
        r: _attack_summary(70.0 + k, {
            '1': 50.0 + k,
            '4': 20.0 - k
        })
        for k, r in enumerate(RUNS)
    }
    summary['ell#0']['series']['pgd@dot/linf/5'] = {'1': 60.0, '4': 40.0}
    for r in RUNS:
        summary[r]['series']['square/linf/20'] = {'1': 69.0, '4': 68.0}
    drawn = arm_means(summary, ARMS)
    runs = {'ell (mean of 3 runs)': [summary[r] for r in ARMS['ell']]}
    fig = attack_curves(drawn, 'linf', runs)
    ax = fig.axes[0]
    thin = [line for line in ax.lines if line.get_linewidth() == 0.7]
    assert len(thin) == 3  # the three runs, unlabelled
    assert all(line.get_label().startswith('_') for line in thin)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend.count("thin: each run's worst case") == 1
    worst = [
        line for line in ax.lines if line.get_label().endswith('worst case')
        and line.get_xdata().size and line.get_label().startswith('ell')
    ]
    assert len(worst) == 1
    # square's curve in a colour of its own, not the worst case's black
    assert not [
        line
        for line in ax.lines if line.get_label().endswith('square/linf/20')
        and line.get_color() == 'black'
    ]
    # a series only one run has (a transfer from its seed's twin): no mean
    assert not [line for line in ax.lines if '@' in line.get_label()]
    assert np.allclose(worst[0].get_ydata(),
                       [71.0, 51.0, 19.0])  # means of 70-72, 50-52, 20-18


def test_attack_curves_keep_the_sweep_apart_and_the_legend_short():
    """The audit's sweep to 64 levels in its own panel (the headline eps
    keep the left one), one legend entry per attack, model and style, a
    colour of its own per attack, the worst case black."""
    series = {
        f'{a}/linf/10': {
            '1': 60.0 - k,
            '4': 40.0 - k
        }
        for k, a in enumerate(
            ['pgd', 'segpgd', 'cospgd', 'apgd-mce', 'apgd-mce-bal', 'apgd-js'])
    }
    series['square/linf/1000'] = {'1': 65.0, '4': 55.0}
    series['pgd/linf/20'] = {'4': 38.0}  # the audit's doubled steps
    series['apgd-mce-bal/linf/10'].update({'16': 3.0, '64': 0.5})
    summary = {
        name:
        dict(
            clean=70.0,
            series=dict(series),
            worst={
                '1': dict(mIoU=30.0),
                '4': dict(mIoU=10.0)
            },
            mean_over_eps={})
        for name in ('ell', 'dot', 'third')
    }
    fig = attack_curves(summary, 'linf')
    head, sweep = fig.axes
    assert head.get_xlim()[1] < 5 and sweep.get_xlim()[1] >= 64
    assert all(max(line.get_xdata()) <= 4.1 for line in head.lines)
    swept = [line.get_label() for line in sweep.lines]
    assert sorted(swept) == [
        f'{n}: apgd-mce-bal/linf/10' for n in ('dot', 'ell', 'third')
    ]
    legend = [t.get_text() for t in sweep.get_legend().get_texts()]
    assert len(legend) == 8 + 3  # 7 attacks, the worst case; 3 models
    colour = {}
    for line in head.lines:
        attack = line.get_label().split(': ')[1].split('/')[0]
        colour.setdefault(attack, set()).add(line.get_color())
    assert all(len(c) == 1 for c in colour.values())  # one per attack
    assert colour['worst case'] == {'black'}
    assert len({c.pop() for c in colour.values()}) == len(colour) == 8
    doubled = [line for line in head.lines if '/20' in line.get_label()]
    plain = [
        line for line in head.lines if line.get_label() == 'ell: pgd/linf/10'
    ]
    assert doubled[0].get_linewidth() < plain[0].get_linewidth()


def _collapse(cosine, spread):
    return dict(
        cosine=cosine,
        relevance_spread=spread,
        stage=[0] * len(cosine),
        images=2,
        samples=2,
        inference='whole',
        tokens=[16] * len(cosine))


@pytest.fixture
def collapse_results():
    rng = np.random.default_rng(1)
    results = {
        r:
        _collapse(
            list(rng.uniform(0.4, 0.7, 4)),
            [None] + list(rng.uniform(0.1, 0.3, 3)))
        for r in ARMS['ell']
    }
    results['dot'] = _collapse([0.6, 0.55, 0.5, 0.45], [None] * 4)
    return results


def test_collapse_figure_draws_the_runs_thin_and_the_mean(collapse_results):
    fig = collapse_figure(collapse_results, 'backbone', ARMS)
    cosine, spread = fig.axes[:2]
    thin = [line for line in cosine.lines if line.get_linewidth() == 0.7]
    assert len(thin) == 3
    means = [line for line in cosine.lines if line.get_linewidth() == 1.5]
    assert [m.get_label() for m in means] == ['ell (mean of 3 runs)', 'dot']
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        'ell (mean of 3 runs)', 'dot', 'thin: each run of an arm'
    ]
    expected = np.mean([collapse_results[r]['cosine'] for r in ARMS['ell']],
                       axis=0)
    assert np.allclose(means[0].get_ydata(), expected)
    spread_mean = [
        line for line in spread.lines if line.get_linewidth() == 1.5
    ]
    assert len(spread_mean) == 1  # the dot-product arm has no m
    assert np.allclose(
        spread_mean[0].get_ydata(),
        np.mean(
            [collapse_results[r]['relevance_spread'][1:] for r in ARMS['ell']],
            axis=0))
    assert spread.get_ylim()[1] >= max(spread_mean[0].get_ydata())


def test_collapse_report_writes_the_arms(collapse_results, tmp_path):
    text = write_collapse_report(collapse_results, str(tmp_path), 'backbone',
                                 ARMS)
    with open(tmp_path / 'collapse.md') as f:
        assert f.read() == text
    assert '(3 runs)' in text
    with open(tmp_path / 'collapse_arms.csv') as f:
        rows = list(csv.reader(f))
    assert rows[0][:5] == ['arm', 'number', 'mean', 'sd', 'n']
    first = rows[1]
    values = [collapse_results[r]['cosine'][0] for r in ARMS['ell']]
    assert first[:2] == ['ell', 'cosine/0']
    assert float(first[2]) == pytest.approx(np.mean(values))
    assert float(first[3]) == pytest.approx(np.std(values, ddof=1))
    assert [float(v) for v in first[5:8]] == pytest.approx(values)


def test_arms_rows_pad_the_runs():
    arms = dict(
        a=dict(
            runs=['a#0', 'a#1'],
            figures=dict(P=dict(mean=2.0, sd=1.0, n=2, runs=[1.0, 3.0]))),
        b=dict(
            runs=['b'],
            figures=dict(P=dict(mean=5.0, sd=None, n=1, runs=[5.0]))))
    header, rows = arms_rows(arms)
    assert header == ['arm', 'number', 'mean', 'sd', 'n', 'run0', 'run1']
    assert rows == [['a', 'P', 2.0, 1.0, 2, 1.0, 3.0],
                    ['b', 'P', 5.0, None, 1, 5.0]]


def test_reports_draw_and_write_the_arms(tmp_path, monkeypatch):
    """The corruption and attack reports hand their figures the arms'
    means (and the attack curves each arm's runs), and write the arms'
    numbers to ``*_arms.csv``."""
    from arm_oracles import runs_of, synthetic_store

    from mmseg_elliptical.robustness.attacks import report as attack_report
    from mmseg_elliptical.robustness.corruption import \
        report as corruption_report
    seen = {}
    monkeypatch.setattr(
        corruption_report, 'heatmaps',
        lambda summary, *a: seen.setdefault('heatmaps', summary) and None)
    monkeypatch.setattr(
        attack_report,
        'attack_curves',
        lambda summary, norm, runs=None: seen.setdefault(
            'curves', (summary, runs)) and None)
    rng = np.random.default_rng(4)
    cells = ['clean', 'fog/1', 'fog/5', 'pgd/linf/4/10']
    runs = dict(
        ell=runs_of(rng, [0.6, 0.55, 0.65], cells),
        dot=runs_of(rng, [0.5], cells))
    store = synthetic_store(tmp_path, runs, dict(norm='linf'))
    names = list(store.data['models'])
    arms = dict(ell=names[:3], dot=names[3:])
    write_robustness_report(
        corruption_verdicts(
            store,
            names, ['fog'], [1, 5],
            'mIoU',
            'dot',
            resamples=20,
            arms=arms), str(tmp_path))
    summary = store.data['summary']
    means = seen['heatmaps']
    assert list(means) == ['ell (mean of 3 runs)', 'dot']
    assert means['ell (mean of 3 runs)']['mPC'] == pytest.approx(
        np.mean([summary[n]['mPC'] for n in names[:3]]))
    with open(tmp_path / 'robustness_arms.csv') as f:
        rows = list(csv.reader(f))
    mpc = next(r for r in rows if r[:2] == ['ell', 'mPC'])
    assert float(mpc[2]) == pytest.approx(
        store.data['arms']['ell']['figures']['mPC']['mean'])
    write_attack_report(
        attack_verdicts(store, names, 'dot', resamples=20, arms=arms),
        str(tmp_path))
    means, drawn_runs = seen['curves']
    summary = store.data['summary']
    assert list(drawn_runs) == ['ell (mean of 3 runs)']  # not the 1-run arm
    assert drawn_runs['ell (mean of 3 runs)'] == [
        summary[n] for n in names[:3]
    ]
    assert means['dot'] == summary['dot']
    assert (tmp_path / 'adversarial_arms.csv').exists()


def test_arms_markdown_leaves_out_numbers_no_arm_has():
    from mmseg_elliptical.robustness.seeds.report import arms_markdown
    none = dict(mean=None, sd=None, n=3, runs=[1.0, None, None])
    arms = dict(
        a=dict(
            runs=['a#0', 'a#1'],
            figures={
                'P': dict(mean=0.12345, sd=0.5, n=2, runs=[0.1, 0.2]),
                'pgd@b#0/linf/4/5': none
            },
            paired=None),
        b=dict(runs=['b'], figures={'pgd@a#0/linf/4/5': none}, paired=None))
    text = arms_markdown(arms, spec='.3f')
    assert '0.123 +- 0.500 (2 runs)' in text
    assert '@' not in text
