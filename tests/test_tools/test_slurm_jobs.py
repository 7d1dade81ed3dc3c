"""``compare_seeds.py --executor slurm`` on a real single-node Slurm
(``tests/slurm_cluster.py``): the runs as Slurm jobs give the runs of
``--executor local``; a job killed by Slurm mid-run and run again ends with
bitwise the weights of an uninterrupted run; a job past its time limit says
so in one line naming its log."""
import json
import os
import os.path as osp
import subprocess
import sys
import time

import pytest
import torch
from builders import DEMO_ELLIPTICAL, ROOT, demo_data_options
from processes import run_command

pytestmark = [pytest.mark.usefixtures('single_thread'), pytest.mark.slow]

TOOL = 'tools/analysis_tools/compare_seeds.py'

#: A hook that holds the run after iteration 2 while ``pause`` is in its
#: work dir (the test kills it there); imported by the runs' configs.
PAUSE = '''
import os, time
from mmengine.hooks import Hook
from mmseg.registry import HOOKS


@HOOKS.register_module()
class PauseAfter(Hook):
    def __init__(self, iteration):
        self.iteration = iteration

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if runner.iter == self.iteration:
            while os.path.exists(os.path.join(runner.work_dir, 'pause')):
                time.sleep(0.2)
'''


def options(demo_root: str) -> list:
    """``--cfg-options`` of a tiny deterministic 4-iteration run."""
    opts = [
        'model.backbone.num_layers=2', 'model.backbone.embed_dims=48',
        'model.decode_head.in_channels=48', 'model.decode_head.channels=48',
        'model.decode_head.embed_dims=48', 'train_dataloader.batch_size=2',
        'train_cfg.max_iters=4', 'train_cfg.val_interval=2',
        'default_hooks.checkpoint.interval=2', 'randomness.deterministic=True'
    ]
    return opts + demo_data_options(demo_root)


def compare(work: str, demo_root: str, *extra: str, config=DEMO_ELLIPTICAL):
    """compare_seeds.py's command line on seed 0 of the tiny run."""
    return [
        sys.executable, TOOL, config, '--names', 'ell', '--seeds', '0',
        '--work-dir', work, *extra, '--cfg-options', *options(demo_root)
    ]


def slurm_args(slurm, *extra: str) -> list:
    return ['--executor', 'slurm', '--partition', slurm.partition, *extra]


def final_weights(work: str) -> dict:
    return torch.load(
        osp.join(work, 'ell', 'seed0', 'iter_4.pth'),
        map_location='cpu',
        weights_only=False)['state_dict']


@pytest.fixture
def paused(tmp_path) -> str:
    """The demo config with the :data:`PAUSE` hook (``pause_hook.py``)."""
    (tmp_path / 'pause_hook.py').write_text(PAUSE)
    path = tmp_path / 'paused.py'
    path.write_text(
        f"_base_ = ['{osp.join(ROOT, DEMO_ELLIPTICAL)}']\n"
        "custom_imports = dict(imports=['mmseg_elliptical', 'pause_hook'], "
        'allow_failed_imports=False)\n'
        "custom_hooks = [dict(type='PauseAfter', iteration=2)]\n")
    return str(path)


@pytest.fixture
def hook_env(tmp_path):
    """The environment of runs whose configs import ``pause_hook``."""
    return dict(
        os.environ,
        OMP_NUM_THREADS='1',
        PYTHONPATH=os.pathsep.join(
            [str(tmp_path), os.environ.get('PYTHONPATH', '')]))


def test_slurm_runs_are_the_local_runs(slurm, demo_root, tmp_path) -> None:
    local, cluster = str(tmp_path / 'local'), str(tmp_path / 'slurm')
    run_command(compare(local, demo_root), timeout=400)
    log = run_command(
        compare(cluster, demo_root, *slurm_args(slurm)), timeout=400).stdout
    assert 'training as job ' in log
    runs = {}
    for work in (local, cluster):
        with open(osp.join(work, 'compare.json')) as f:
            runs[work] = json.load(f)['runs'][0]
        with open(osp.join(work, 'compare.md')) as f:
            assert f.read().splitlines()[2].startswith('| ell ')
    job = runs[cluster]['job']
    assert job['executor'] == 'slurm' and osp.isfile(job['log']), job
    assert slurm.final_state(job['id']) == 'COMPLETED'
    assert runs[cluster]['history'] == runs[local]['history']
    expected, got = final_weights(local), final_weights(cluster)
    assert [k for k in expected if not torch.equal(got[k], expected[k])] == []


def wait_for(path: str, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not osp.exists(path):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f'no {path}'
        time.sleep(0.2)


def test_a_killed_job_run_again_ends_as_an_uninterrupted_run(
        slurm, demo_root, tmp_path, hook_env, paused) -> None:
    whole, cut = str(tmp_path / 'whole'), str(tmp_path / 'cut')
    run_command(compare(whole, demo_root, config=paused), env=hook_env)
    run_dir = osp.join(cut, 'ell', 'seed0')
    os.makedirs(run_dir)
    open(osp.join(run_dir, 'pause'), 'w').close()
    command = compare(cut, demo_root, *slurm_args(slurm), config=paused)
    proc = subprocess.Popen(
        command,
        env=dict(hook_env, SLURM_CONF=slurm.conf),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True)
    try:
        wait_for(osp.join(run_dir, 'iter_2.pth'), proc)
        with open(osp.join(run_dir, 'submitit', 'job.json')) as f:
            job = json.load(f)
        slurm.command('scancel', '--signal=KILL', job['id'])
        out = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 1, out[-3000:]
    # Killed with its job step (the training and submitit's task), the job
    # ends failed or without a result: either way its id and log are named.
    assert f'compare_seeds.py: ell seed 0: job {job["id"]} ' in out, out
    assert f'its log: {job["log"]}' in out, out[-3000:]
    assert not osp.exists(osp.join(run_dir, 'iter_4.pth'))
    os.remove(osp.join(run_dir, 'pause'))
    log = run_command(command, env=hook_env).stdout
    assert 'training as job ' in log
    with open(osp.join(run_dir, 'train.log')) as f:
        assert 'resumed epoch: 0, iter: 2' in f.read()
    expected, got = final_weights(whole), final_weights(cut)
    assert got.keys() == expected.keys()
    assert [k for k in expected if not torch.equal(got[k], expected[k])] == []
    # Run once more: nothing is trained again.
    log = run_command(command, env=hook_env).stdout
    assert 'done before, kept' in log and 'training as job' not in log


def test_a_job_past_its_time_limit_says_so(slurm, demo_root, tmp_path,
                                           hook_env, paused) -> None:
    work = str(tmp_path / 'work')
    run_dir = osp.join(work, 'ell', 'seed0')
    os.makedirs(run_dir)
    open(osp.join(run_dir, 'pause'), 'w').close()  # never ends by itself
    proc = subprocess.run(
        compare(
            work,
            demo_root,
            *slurm_args(slurm, '--time', '1', '--max-timeouts', '0'),
            config=paused),
        env=dict(hook_env, SLURM_CONF=slurm.conf),
        capture_output=True,
        text=True,
        timeout=400)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(osp.join(run_dir, 'submitit', 'job.json')) as f:
        job = json.load(f)
    assert proc.stderr.strip().splitlines()[-1] == (
        f'compare_seeds.py: ell seed 0: job {job["id"]} passed its time '
        f'limit; its log: {job["log"]}'), proc.stderr[-3000:]
