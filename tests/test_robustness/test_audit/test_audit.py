"""The gradient-masking audit's verdict on synthetic cells (each check made
to pass and to fail), its extra cells, and the tool's ``--audit`` on the
demo twins."""
import numpy as np
import pytest
from processes import load_tool, refused

from mmseg_elliptical.robustness.attacks.cells import Attack, AuditPreset
from mmseg_elliptical.robustness.audit.cells import audit_cells
from mmseg_elliptical.robustness.audit.verdict import (CLEAN_VERDICT,
                                                       gradient_masking_audit,
                                                       preset_text)
from mmseg_elliptical.robustness.grid import loop as grid_loop
from mmseg_elliptical.utils.config import ModelSpec


def healthy() -> dict:
    """A model whose cells show no sign of masking (aAcc in percent)."""
    return {
        'clean': dict(aAcc=90.),
        'pgd/linf/4/5': dict(aAcc=30.),
        'pgd/linf/4/10': dict(aAcc=29.9),
        'segpgd/linf/4/5': dict(aAcc=35.),
        'segpgd/linf/4/10': dict(aAcc=35.),
        'fgsm/linf/4/1': dict(aAcc=50.),
        'pgd/linf/8/5': dict(aAcc=10.),
        'pgd/linf/255/5': dict(aAcc=0.5),
        'pgd-adaptive/linf/4/5': dict(aAcc=29.8),
        'pgd-adaptive/linf/4/10': dict(aAcc=29.8),
        'square/linf/4/20': dict(aAcc=60.),
        'pgd@dot/linf/4/5': dict(aAcc=70.),
    }


#: The verdict of healthy cells without per-image areas.
OPEN = 'inconclusive: white-box beats black-box per image'


def core(result) -> str:
    """The verdict before the image count and the preset."""
    return result['verdict'].split('; ')[0]


def checks_of(result) -> dict:
    return {c['check']: c['passed'] for c in result['checks']}


def detail_of(result, check: str) -> str:
    return next(c['detail'] for c in result['checks'] if c['check'] == check)


def audit(cells, elliptical=True, correct=lambda key: None, budget=()):
    return gradient_masking_audit(
        cells, correct, [4.], elliptical, budget=budget)


def test_a_run_below_the_preset_says_so():
    from mmseg_elliptical.robustness.audit.verdict import budget_shortfalls
    got = gradient_masking_audit(healthy(), lambda k: None, [4.], True)
    # without per-image areas the per-image check cannot decide
    assert got['verdict'] == (
        f'{OPEN}; not checked: zero progress, per class; images not stored, '
        f'{preset_text()}; budget below the '
        'audit preset: swept to 255 levels: pgd 5 (preset: apgd-mce-bal 100 '
        'iterations), apgd-dlr 0 iterations at eps 4 (preset: 100, the '
        'margin loss), square 20 queries at eps 4 (preset: 1000)')
    at_preset = {
        **healthy(),
        'square/linf/4/1000': dict(aAcc=60.),
        'apgd-mce-bal-adaptive/linf/255/100': dict(aAcc=0.),
        'apgd-mce-bal-adaptive/linf/4/100': dict(aAcc=29.),  # the sweep's
        'apgd-mce-bal-adaptive/linf/4/200': dict(aAcc=29.),  # doubled
        'apgd-dlr-adaptive/linf/4/100': dict(aAcc=29.)  # the margin loss
    }
    assert budget_shortfalls(at_preset, [4.]) == []
    undoubled = dict(at_preset)
    del undoubled['segpgd/linf/4/10']
    assert budget_shortfalls(undoubled, [4.]) == [
        'not run with twice the steps: segpgd (preset: every iterative '
        'attack)'
    ]
    assert budget_shortfalls(
        at_preset, [1., 4.]) == ['square 0 queries at eps 1 (preset: 1000)']
    del at_preset['pgd@dot/linf/4/5']
    assert budget_shortfalls(at_preset,
                             [4.]) == ['no transfer from another model']


def test_a_healthy_model_passes_every_check():
    got = audit(healthy())
    assert core(got) == OPEN
    assert checks_of(got) == {
        'eps sweep': True,
        'sanity': True,
        'white-box beats black-box': True,
        'white-box beats black-box per image': None,
        'zero progress': None,  # no per-image areas
        'black-box strength': True,
        'per class': None,
        'iterations': True,
        'single step': True,
        'adaptive': True
    }
    sweep = detail_of(got, 'eps sweep')
    assert 'eps 4: 29.80' not in sweep  # the plain series is swept
    assert 'pgd/linf/5 aAcc eps 4: 30.00, eps 8: 10.00, eps 255: 0.50' in sweep
    assert 'tolerance 0.50 (fixed: no per-image areas)' in sweep
    assert 'adaptive' not in checks_of(audit(healthy(), elliptical=False))


@pytest.mark.parametrize(
    'change, failed',
    [
        ({
            'pgd/linf/255/5': dict(aAcc=12.)
        }, 'eps sweep'),
        ({
            'square/linf/4/20': dict(aAcc=29.)
        }, 'white-box beats black-box'),
        ({
            'pgd@dot/linf/4/5': dict(aAcc=29.2)
        }, 'white-box beats black-box'),
        (
            {
                'pgd/linf/4/10': dict(
                    aAcc=28.)  # 1.8 points: over 0.5 + margin 1
            },
            'iterations'),
        ({
            'fgsm/linf/4/1': dict(aAcc=29.2)
        }, 'single step'),
        ({
            'pgd-adaptive/linf/4/5': dict(aAcc=20.)
        }, 'adaptive'),
    ])
def test_each_failed_check_is_named(change, failed):
    got = audit({**healthy(), **change})
    assert checks_of(got)[failed] is False
    assert core(got) == f'failed: {failed}'
    assert '1 of' not in detail_of(got, failed) or 'fail' in \
        detail_of(got, failed)


def test_the_attacks_through_m_may_win_by_the_margin():
    """Through ``m`` lower than plain by the tolerance (0.5, fixed) plus
    less than the margin passes; by more fails."""
    worst = 29.9  # the plain cells' at eps 4 (pgd/linf/4/10)
    for below, passed in ((1.4, True), (1.6, False)):
        got = audit({
            **healthy(), 'pgd-adaptive/linf/4/5':
            dict(aAcc=worst - below)
        })
        assert checks_of(got)['adaptive'] is passed, below
        assert 'margin 1.00' in detail_of(got, 'adaptive')


def test_more_iterations_that_help_less_pass():
    """Twice the steps leaving the model *more* accurate is noise, not a
    sign of an unconverged attack (the old check failed here)."""
    got = audit({**healthy(), 'pgd/linf/4/10': dict(aAcc=34.)})
    assert checks_of(got)['iterations'] is True


def test_within_the_tolerance_passes_and_the_sweep_says_where_it_stops():
    cells = {
        **healthy(), 'square/linf/4/20': dict(aAcc=29.4),
        'pgd/linf/4/10': dict(aAcc=29.4),
        'pgd/linf/16/5': dict(aAcc=9.),
        'pgd/linf/32/5': dict(aAcc=9.5),
        'pgd/linf/64/5': dict(aAcc=9.),
        'pgd/linf/128/5': dict(aAcc=9.2),
        'pgd/linf/255/5': dict(aAcc=9.)
    }
    got = audit(cells)
    assert checks_of(got)['white-box beats black-box'] is True
    assert checks_of(got)['iterations'] is True
    assert core(got) == 'failed: eps sweep'
    assert 'stops falling at eps 16' in detail_of(got, 'eps sweep')
    cells['pgd/linf/32/5'] = dict(aAcc=5.)
    cells['pgd/linf/64/5'] = dict(aAcc=4.)
    cells['pgd/linf/128/5'] = dict(aAcc=3.)
    cells['pgd/linf/255/5'] = dict(aAcc=2.)  # falling, not below 1 % yet
    detail = detail_of(audit(cells), 'eps sweep')
    assert 'still falling at eps 255' in detail and 'stops' not in detail


def test_missing_cells_are_not_checked():
    cells = {
        k: v
        for k, v in healthy().items()
        if '@' not in k and 'square' not in k and '/10' not in k
        and '/255/' not in k and '/8/' not in k and 'fgsm' not in k
    }
    got = audit(cells)
    assert checks_of(got)['eps sweep'] is None
    # checks left out: never the clean phrase (issue 63)
    assert not got['verdict'].startswith(CLEAN_VERDICT)
    assert core(got) == (
        'inconclusive: not checked: eps sweep, white-box beats black-box, '
        'white-box beats black-box per image, zero progress, black-box '
        'strength, per class, iterations, single step')


def test_white_box_worst_is_the_per_image_minimum():
    """Two white-box cells that each keep one image right: per image the
    minimum is 0, below the black-box cell, though each cell alone is
    above it."""
    cells = {
        'pgd/linf/4/5': dict(aAcc=50.),
        'segpgd/linf/4/5': dict(aAcc=50.),
        'square/linf/4/20': dict(aAcc=10.),
    }
    right = {
        'pgd/linf/4/5': np.array([10, 0]),
        'segpgd/linf/4/5': np.array([0, 10]),
        'square/linf/4/20': np.array([1, 1])
    }
    got = audit(
        cells, False, lambda k: (right[k], np.array([10, 10]))
        if k in right else None)
    assert checks_of(got)['white-box beats black-box'] is True
    assert checks_of(audit(cells, False))['white-box beats black-box'] is \
        False


def test_audit_cells():
    pgd = Attack('pgd', 'linf', 4, 5, 1.)
    fgsm = Attack('fgsm', 'linf', 4, 1, 4.)
    specs = [ModelSpec('a', 'a.py', 'a.pth'), ModelSpec('b', 'b.py', 'b.pth')]
    got = audit_cells(
        {
            'a': [(None, None), pgd, fgsm],
            'b': [(None, None), pgd]
        }, specs, [4.], 7)
    keys = [grid_loop.key_of(c) for c in got['a']]
    assert keys == [
        'clean', 'pgd/linf/4/5', 'fgsm/linf/4/1', 'pgd/linf/8/5',
        'pgd/linf/16/5', 'pgd/linf/32/5', 'pgd/linf/64/5', 'pgd/linf/128/5',
        'pgd/linf/255/5', 'fgsm/linf/8/1', 'fgsm/linf/16/1', 'fgsm/linf/32/1',
        'fgsm/linf/64/1', 'fgsm/linf/128/1', 'fgsm/linf/255/1',
        'pgd/linf/4/10', 'square/linf/4/7', 'pgd@b/linf/4/5'
    ]
    keys_b = [grid_loop.key_of(c) for c in got['b']]
    assert 'fgsm@a/linf/4/1' in keys_b
    # FGSM where the run has none (the single-step check), once
    assert keys_b.count('fgsm/linf/4/1') == 1 and keys.count(
        'fgsm/linf/4/1') == 1
    # the sweep keeps each attack's step / eps (a fixed step would stall)
    steps = {grid_loop.key_of(c): c.step_size for c in got['a'][1:]}
    assert [steps[f'pgd/linf/{e}/5'] for e in (8, 16, 32, 64, 128, 255)] == \
        [2., 4., 8., 16., 32., 63.75]
    assert steps['fgsm/linf/255/1'] == 255.
    assert steps['pgd/linf/4/10'] == 1.  # the doubled steps keep theirs
    ratio = audit_cells({'a': [pgd], 'b': [pgd]}, specs, [4.], 7, 0.5)
    assert {
        c.eps: c.step_size
        for c in ratio['a']
        if c.steps == 5 and not hasattr(c, 'source') and c.name == 'pgd'
    } == {
        4.: 1.,
        8.: 4.,
        16.: 8.,
        32.: 16.,
        64.: 32.,
        128.: 64.,
        255.: 127.5
    }


def test_transfer_sources_pair_the_arms_runs():
    from mmseg_elliptical.robustness.audit.cells import transfer_sources
    arms = dict(ell=['e0', 'e1', 'e2'], dot=['d0', 'd1'], x=['x'])
    assert transfer_sources(arms) == dict(
        e0=['d0', 'x'],
        e1=['d1', 'x'],
        e2=['d1', 'x'],
        d0=['e0', 'x'],
        d1=['e1', 'x'],
        x=['e0', 'd0'])
    # one run per arm: every other model, as without arms
    assert transfer_sources(dict(a=['a'], b=['b'], c=['c'])) == dict(
        a=['b', 'c'], b=['a', 'c'], c=['a', 'b'])


def test_audit_cells_of_arms_transfer_between_arms_only():
    pgd = Attack('pgd', 'linf', 4, 5, 1.)
    names = ['e#0', 'e#1', 'd#0', 'd#1']
    specs = [ModelSpec(n, f'{n}.py', f'{n}.pth') for n in names]
    got = audit_cells({n: [(None, None), pgd]
                       for n in names},
                      specs, [4.],
                      7,
                      arms=dict(e=names[:2], d=names[2:]))
    for name, source in zip(names, ['d#0', 'd#1', 'e#0', 'e#1']):
        sources = [c.source for c in got[name] if hasattr(c, 'source')]
        assert sources == [source]


def test_audit_in_the_tool(demo_models, tmp_path, capsys):
    tool = load_tool('analysis_tools/adversarial.py')
    argv = demo_models + [
        '--names', 'ell', 'dot', '--attacks', 'pgd', '--epsilons', '16',
        '--steps', '1', '--step-size', '4', '--max-images', '1', '--queries',
        '2', '--adaptive', '--baseline', 'dot'
    ]
    data = tool.main(
        argv +
        ['--audit', '--audit-sweep-steps', '4', '--work-dir',
         str(tmp_path)])
    cells = data['models']['ell']['cells']
    assert {
        'apgd-mce-bal/linf/16/4',
        'apgd-mce-bal/linf/32/4',
        'apgd-mce-bal-adaptive/linf/64/4',
        'pgd/linf/16/2',
        'fgsm/linf/16/1',
        'square/linf/16/2',
        'pgd@dot/linf/16/1',
        'apgd-mce-bal/linf/16/8',
        'apgd-mce-bal-adaptive/linf/16/8',  # the preset's cell doubled
        'apgd-dlr/linf/16/4',
        'apgd-dlr-adaptive/linf/16/4'  # margin loss
    } <= set(cells)
    assert 'pgd/linf/32/1' not in cells  # the preset sweeps its own attack
    assert data['summary']['ell']['audit']['budget'] == [
        'swept to 255 levels: apgd-mce-bal 4, apgd-mce-bal-adaptive 4 '
        '(preset: apgd-mce-bal 100 iterations)',
        'apgd-dlr 4 iterations at eps 16 (preset: 100, the margin loss)',
        'square 2 queries at eps 16 (preset: 1000)'
    ]
    assert 'pgd-adaptive@ell/linf/16/1' in data['models']['dot']['cells']
    # Against the baseline, one note per reason, not one per series and
    # eps: the bootstrap's refusal (one image), the adaptive series compared
    # with the baseline's plain attack, the transfers from the baseline
    # itself (no counterpart).
    notes = data['summary']['ell']['paired']['notes']
    assert len(notes) == 3, notes
    assert notes[0].startswith('No paired test on ') and notes[0].endswith(
        'needs 2 or more, got 1.') and notes[0].count(', ') > 5, notes
    assert notes[1].startswith(
        'apgd-dlr-adaptive/linf/4, apgd-mce-bal-adaptive/linf/4, '
        'apgd-mce-bal-adaptive/linf/8, '
        'pgd-adaptive/linf/1, pgd-adaptive/linf/2: compared with '
        "dot's plain attack"), notes
    assert 'pgd@dot/linf/1' in notes[2] and \
        'no paired test, dot has no such cells' in notes[2], notes
    assert 'pgd@dot/linf/1' not in notes[0]
    # a model that failed the audit ran BPDA and EOT, and its verdict gives
    # the worst case with them
    for name in ('ell', 'dot'):
        got = data['summary'][name]['audit']
        if not got['verdict'].startswith('failed: '):
            assert got['remedies'] is None
            continue
        for w in ('bpda', 'eot8'):
            assert f'apgd-mce-bal-{w}/linf/16/4' in \
                data['models'][name]['cells']
        assert '; with BPDA and EOT the worst case at eps 16 is ' in \
            got['verdict']
    assert any(data['summary'][n]['audit']['remedies'] for n in ('ell', 'dot'))
    for name in ('ell', 'dot'):
        got = data['summary'][name]['audit']
        assert '; 1 image, fewer than 30, audit preset: ' in got['verdict']
        assert list(data['summary'][name]['worst']) == ['16']
    assert 'adaptive' in checks_of(data['summary']['ell']['audit'])
    text = (tmp_path / 'adversarial.md').read_text()
    assert '## Gradient-masking audit' in text
    assert 'ell: ' + data['summary']['ell']['audit']['verdict'] in text
    assert 'as SEA\'s released code computes them: mIoU' in text
    worst = data['summary']['ell']['worst']['16']
    assert {'mIoU_sea', 'aAcc_sea', 'sea_start'} <= set(worst)
    assert 'argument --audit' in refused(capsys, tool.main,
                                         argv + ['--audit', '--norm', 'l2'])


def test_the_preset_sweeps_its_own_attack_with_its_iterations():
    pgd = Attack('pgd', 'linf', 4, 5, 1.)
    specs = [ModelSpec('a', 'a.py', 'a.pth')]
    preset = AuditPreset(sweep_steps=7, queries=9)
    got = audit_cells(
        {
            'a': [(None, None), pgd,
                  Attack('pgd', 'linf', 4, 5, 1., adaptive=True)]
        },
        specs, [1., 4.],
        preset.queries,
        preset=preset,
        class_weights={'a': (1., 2.)})
    swept = [c for c in got['a'] if getattr(c, 'name', '') == 'apgd-mce-bal']
    assert sorted(
        (c.eps, c.adaptive, c.steps)
        for c in swept) == sorted([(e, a, 7)
                                   for e in (4., 8., 16., 32., 64., 128., 255.)
                                   for a in (False, True)] +
                                  [(4., a, 14) for a in (False, True)])
    assert {c.class_weights for c in swept} == {(1., 2.)}
    keys = [grid_loop.key_of(c) for c in got['a'][1:]]
    assert 'pgd/linf/8/5' not in keys  # not the run's own attacks
    assert {'square/linf/1/9', 'square/linf/4/9', 'fgsm/linf/1/1'} <= set(keys)


def test_notes_of_one_reason_fold_into_one_line():
    from mmseg_elliptical.robustness.statistics.paired import fold_notes
    assert fold_notes([
        'No paired test on a 1: why.', 'other', 'No paired test on b 4: why.',
        'No paired test on c: because: x.'
    ]) == [
        'No paired test on a 1, b 4: why.', 'other',
        'No paired test on c: because: x.'
    ]
