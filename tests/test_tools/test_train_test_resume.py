"""mmseg's train/test scripts through tools/, and exact resume.

One flow, each step in a fresh interpreter as a user runs it:
``tools/train.py`` trains the tiny elliptical demo for 2 iterations (a
checkpoint, a validation mIoU), ``tools/test.py`` tests that checkpoint
(loaded through the plugin's weights-only loader), and ``tools/train.py
--resume`` continues the job to 4 iterations. The result must equal,
bitwise, an uninterrupted 4-iteration run (``randomness=dict(seed=0,
deterministic=True)``): weights, optimizer moments and schedulers.

What makes the resume exact: mmengine's ``IterBasedTrainLoop`` advances the
data iterator by the resumed number of iterations before training, which
replays the ``InfiniteSampler``'s seeded order *and* the pipeline's random
flips (numpy's global RNG, reseeded from the checkpoint's seed), since
loading runs in the main process (``num_workers=0``). With worker processes
the flips come from per-worker seeds derived from the seed, rank and worker
id, which the skip replays too.
"""
import os.path as osp
import re
import sys

import pytest
import torch
from builders import DEMO_ELLIPTICAL, tiny_config
from mmengine.runner import Runner
from processes import run_tool

from mmseg_elliptical.engine import load_from_local, run_mmseg_tool

pytestmark = pytest.mark.usefixtures('single_thread')

DETERMINISTIC = dict(seed=0, deterministic=True)


def config_file(demo_root, tmp_path, work_dir, max_iters, name):
    cfg = tiny_config(
        DEMO_ELLIPTICAL, demo_root, work_dir, **{
            'train_cfg.max_iters': max_iters,
            'randomness': DETERMINISTIC,
            'experiment_name': name,
        })
    path = str(tmp_path / f'{name}.py')
    cfg.dump(path)
    return cfg, path


@pytest.mark.slow  # trains end to end, in subprocesses
def test_train_test_resume_exactly(demo_root, tmp_path):
    dir_a, dir_b = str(tmp_path / 'a'), str(tmp_path / 'b')
    cfg_a, _ = config_file(demo_root, tmp_path, dir_a, 4, 'uninterrupted')
    Runner.from_cfg(cfg_a).train()

    _, first = config_file(demo_root, tmp_path, dir_b, 2, 'first')
    log = run_tool('train.py', first)
    assert re.search(r'Iter\(val\).*mIoU: \d+\.\d+', log)
    assert osp.isfile(osp.join(dir_b, 'iter_2.pth'))
    assert not osp.exists(osp.join(dir_b, 'iter_4.pth'))

    log = run_tool('test.py', first, osp.join(dir_b, 'iter_2.pth'),
                   '--work-dir', str(tmp_path / 'test'))
    assert 'Load checkpoint from' in log
    assert re.search(r'Iter\(test\).*mIoU: \d+\.\d+', log)

    # "Restart the job": a new process, same work_dir, --resume.
    _, second = config_file(demo_root, tmp_path, dir_b, 4, 'second')
    log = run_tool('train.py', second, '--resume')
    assert 'resumed epoch: 0, iter: 2' in log
    assert 'Advance dataloader 2 steps' in log
    assert 'Iter(train) [1/4]' not in log and 'Iter(train) [3/4]' in log

    a = load_from_local(osp.join(dir_a, 'iter_4.pth'))
    b = load_from_local(osp.join(dir_b, 'iter_4.pth'))
    assert a['meta']['iter'] == b['meta']['iter'] == 4
    assert a['state_dict'].keys() == b['state_dict'].keys()
    differ = [
        k for k in a['state_dict']
        if not torch.equal(a['state_dict'][k], b['state_dict'][k])
    ]
    assert not differ, f'weights differ after resume: {differ}'
    # The optimizer moments too (bitwise), and the learning rate schedule.
    opt_a, opt_b = a['optimizer']['state'], b['optimizer']['state']
    assert opt_a.keys() == opt_b.keys()
    for i in opt_a:
        for key in ('exp_avg', 'exp_avg_sq'):
            assert torch.equal(opt_a[i][key], opt_b[i][key]), (i, key)
    assert a['param_schedulers'] == b['param_schedulers']
    # And the weights moved since the checkpoint (the resumed part trained).
    mid = load_from_local(osp.join(dir_b, 'iter_2.pth'))['state_dict']
    assert any(not torch.equal(mid[k], b['state_dict'][k]) for k in mid)


@pytest.mark.parametrize('script, flags', [
    ('test.py', ('--work-dir', '--out', '--show-dir', '--tta', '--launcher',
                 '--cfg-options', '--show', '--wait-time')),
    ('train.py',
     ('--work-dir', '--resume', '--amp', '--cfg-options', '--launcher')),
])
def test_help_lists_mmseg_flags(script, flags, monkeypatch, capsys):
    # In process: what tools/<script> runs (the scripts themselves run as
    # subprocesses in test_train_test_resume_exactly).
    monkeypatch.setattr(sys, 'argv', [osp.join('tools', script), '-h'])
    with pytest.raises(SystemExit) as exit_:
        run_mmseg_tool(script)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert f'usage: {script}' in out
    for flag in flags:
        assert flag in out
