"""Exact resume: a run interrupted after a checkpoint ends where an
uninterrupted one does.

Run A trains the tiny elliptical demo for 4 iterations. Run B trains 2
iterations (checkpoint at 2), its process ends, and a fresh interpreter
resumes it to 4 through ``tools/train.py --resume``, which also loads the
checkpoint (message hub, optimizer, schedulers) through the plugin's
weights-only loader. Both runs use ``randomness=dict(seed=0,
deterministic=True)``.

What makes it exact: mmengine's ``IterBasedTrainLoop`` advances the data
iterator by the resumed number of iterations before training, which replays
the ``InfiniteSampler``'s seeded order *and* the pipeline's random flips
(numpy's global RNG, reseeded from the checkpoint's seed), since loading runs
in the main process (``num_workers=0``). With worker processes the flips come
from per-worker seeds derived from the seed, rank and worker id, which the
skip replays too.
"""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.runner import Runner

from conftest import DEMO_ELLIPTICAL, ROOT, tiny_config
from mmseg_elliptical.utils import load_from_local

pytestmark = pytest.mark.usefixtures('single_thread')

DETERMINISTIC = dict(seed=0, deterministic=True)


def config(demo_root: str, work_dir: str, max_iters: int, name: str):
    return tiny_config(
        DEMO_ELLIPTICAL, demo_root, work_dir, **{
            'train_cfg.max_iters': max_iters,
            'randomness': DETERMINISTIC,
            'experiment_name': name,
        })


def test_interrupted_run_resumes_exactly(demo_root, tmp_path) -> None:
    dir_a, dir_b = str(tmp_path / 'a'), str(tmp_path / 'b')
    Runner.from_cfg(config(demo_root, dir_a, 4, 'resume_a')).train()
    Runner.from_cfg(config(demo_root, dir_b, 2, 'resume_b')).train()
    assert osp.isfile(osp.join(dir_b, 'iter_2.pth'))
    assert not osp.exists(osp.join(dir_b, 'iter_4.pth'))

    # "Restart the job": a new process, same work_dir, --resume.
    cfg_b = config(demo_root, dir_b, 4, 'resume_b2')
    cfg_file = str(tmp_path / 'b.py')
    cfg_b.dump(cfg_file)
    proc = subprocess.run(
        [sys.executable, 'tools/train.py', cfg_file, '--resume'],
        cwd=ROOT, capture_output=True, text=True,
        env=dict(os.environ, OMP_NUM_THREADS='1'), timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert 'resumed epoch: 0, iter: 2' in log
    assert 'Advance dataloader 2 steps' in log

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
