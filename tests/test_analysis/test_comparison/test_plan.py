"""make report's plan and countdown: the steps announced with their
estimates, the time left scaled by how the finished steps went; the plan
tool counts the missing trainings."""
import pytest
from processes import load_tool

from mmseg_elliptical.analysis.comparison.plan import (SECTION_SECONDS,
                                                       TRAIN_SECONDS,
                                                       Countdown, minutes)


def test_countdown_announces_and_scales_what_is_left():
    lines = []
    countdown = Countdown([('a', 60.), ('b', 600.), ('c', 120.)], lines.append)
    countdown.announce('job')
    assert lines == [
        'job: 3 steps, about 13 min in all (estimated from this machine\'s '
        'measurements, idle; docs/demo.md):', '  - a: about 1 min',
        '  - b: about 10 min', '  - c: about 2 min'
    ]
    countdown.done(120.)  # twice the estimate: the rest too
    assert lines[-1] == 'a: done in 2 min; about 24 min left (2 steps)'
    assert countdown.left() == pytest.approx(2 * 720.)
    countdown.done(300.)  # 420 s against 660 estimated
    assert countdown.left() == pytest.approx(120. * 420 / 660)
    countdown.done(10.)
    assert lines[-1] == 'c: done in < 1 min; all done'


def test_the_scale_is_bounded():
    countdown = Countdown([('a', 10.), ('b', 100.)], lambda _: None)
    countdown.done(1000.)  # a hundred times slower: at most four
    assert countdown.left() == pytest.approx(400.)


def test_minutes():
    assert minutes(29) == '< 1 min' and minutes(90) == '2 min'


def test_the_plan_counts_the_missing_trainings(tmp_path, capsys):
    tool = load_tool('misc/report_plan.py')
    there = tmp_path / 'a.pth'
    there.write_bytes(b'')
    paths = [str(there)] + [str(tmp_path / f'{i}.pth') for i in range(5)]
    steps = tool.report_steps(paths, jobs=2)
    assert steps[0] == ('5 of 6 trainings (2 at once)', 3 * TRAIN_SECONDS)
    assert steps[1:] == list(SECTION_SECONDS)
    assert tool.report_steps([str(there)], 2) == list(SECTION_SECONDS)
    tool.main(paths + ['--jobs', '2'])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('make report: 4 steps, about ')
    assert out[1] == ('  - 5 of 6 trainings (2 at once): about '
                      f'{3 * TRAIN_SECONDS / 60:.0f} min')
    with pytest.raises(SystemExit):
        tool.main(paths + ['--jobs', '0'])
