"""The slurm_*.sh scripts against a real single-node Slurm
(``tests/slurm_cluster.py``) on CPU tasks: ``slurm_train.sh`` with 2 tasks
trains the weights of the 2-process torchrun run, bitwise;
``slurm_robustness.sh``, ``slurm_adversarial.sh`` and ``slurm_certify.sh``
with 2 tasks give the single process's cells and per-image areas exactly.
Without a cluster: the GPUs asked for only where there are some."""
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch
from builders import DEMO_ELLIPTICAL, ROOT, tiny_config
from processes import free_port, run_command

# the cluster's daemons, srun and its tasks: processes
pytestmark = [pytest.mark.usefixtures('single_thread'), pytest.mark.slow]

WORLD = 2


def weights(work_dir: str, iteration: int = 4) -> dict:
    """The state dict of ``iter_<iteration>.pth`` in ``work_dir``."""
    return torch.load(
        osp.join(work_dir, f'iter_{iteration}.pth'),
        map_location='cpu',
        weights_only=False)['state_dict']


def two_process_config(demo_root, tmp_path, name: str) -> str:
    """The tiny demo run (deterministic, seed 0) at 1 image a process,
    dumped to ``tmp_path/<name>.py``, its work dir ``tmp_path/<name>``."""
    cfg = tiny_config(
        DEMO_ELLIPTICAL,
        demo_root,
        str(tmp_path / name),
        experiment_name=name,
        **{
            'train_dataloader.batch_size': 1,
            'randomness': dict(seed=0, deterministic=True)
        })
    path = str(tmp_path / f'{name}.py')
    cfg.dump(path)
    return path


def test_slurm_train_sh_on_cpu_tasks_matches_torchrun(slurm, demo_root,
                                                      tmp_path) -> None:
    torchrun = two_process_config(demo_root, tmp_path, 'torchrun')
    run_command([
        sys.executable, '-m', 'torch.distributed.run',
        f'--nproc_per_node={WORLD}', f'--master_port={free_port()}',
        'tools/train.py', torchrun, '--launcher', 'pytorch'
    ],
                timeout=600)
    config = two_process_config(demo_root, tmp_path, 'slurm')
    proc = run_command(
        ['bash', 'tools/slurm_train.sh', slurm.partition, 'train', config],
        env=slurm.cpu_job_env(WORLD),
        timeout=600)
    log = proc.stdout + proc.stderr
    assert '--gres' not in log and '--ntasks=2' in log, log[-3000:]
    assert 'Distributed launcher: slurm' in log, log[-3000:]
    assert 'Distributed training: True' in log, log[-3000:]
    expected, got = weights(str(tmp_path / 'torchrun')), weights(
        str(tmp_path / 'slurm'))
    assert got.keys() == expected.keys()
    differ = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert not differ, differ


FAKE_SRUN = """#!/usr/bin/env bash
printf '%s\\n' "$@"
"""


@pytest.mark.parametrize('env, expected, absent', [
    ({}, ['--gres=gpu:4', '--ntasks=4', '--ntasks-per-node=4'], []),
    ({
        'GPUS_PER_NODE': '0',
        'TASKS': '6',
        'TASKS_PER_NODE': '3'
    }, ['--ntasks=6', '--ntasks-per-node=3'], ['--gres']),
    ({
        'GPUS_PER_NODE': '0',
        'GPUS': '2'
    }, ['--ntasks=2', '--ntasks-per-node=2'], ['--gres']),
])
def test_gpus_are_asked_for_only_when_there_are_some(tmp_path, env, expected,
                                                     absent) -> None:
    # No cluster: a fake srun prints its arguments.
    (tmp_path / 'srun').write_text(FAKE_SRUN)
    (tmp_path / 'srun').chmod(0o755)
    proc = subprocess.run(
        ['bash', 'tools/slurm_train.sh', 'part', 'job', 'cfg.py'],
        cwd=ROOT,
        env=dict(
            os.environ,
            PATH=f'{tmp_path}:{os.environ["PATH"]}',
            PYTHON='py',
            **env),
        capture_output=True,
        text=True,
        timeout=60)
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    for flag in expected:
        assert flag in args, args
    assert not [a for a in args for flag in absent if a.startswith(flag)]


@pytest.mark.parametrize('env, words', [
    ({
        'GPUS_PER_NODE': '0',
        'TASKS': '0'
    }, "TASKS '0' is not a positive integer"),
    ({
        'GPUS_PER_NODE': 'two'
    }, "GPUS_PER_NODE 'two' is not a whole number"),
])
def test_a_bad_task_count_is_one_line(env, words) -> None:
    proc = subprocess.run(
        ['bash', 'tools/slurm_train.sh', 'part', 'job', 'cfg.py'],
        cwd=ROOT,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=60)
    assert proc.returncode == 2
    assert words in proc.stderr.splitlines()[-1], proc.stderr


#: Small grids of the three evidence tools, and what their cells record
#: beside the scores.
GRIDS = {
    'robustness': [
        '--corruptions', 'gaussian_noise', '--severities', '1', '--max-images',
        '4', '--resamples', '100'
    ],
    'adversarial': [
        '--attacks', 'pgd', '--epsilons', '4', '--steps', '2', '--step-size',
        '2', '--max-images', '4', '--resamples', '100'
    ],
    'certify': [
        '--sigmas', '0.1', '--taus', '0.55', '--n0', '3', '--samples', '40',
        '--alpha', '0.05', '--corrections', 'holm', '--max-images', '4',
        '--resamples', '100'
    ],
}
TIMING = ('seconds', 'finished')


def cells(work: str, tool: str) -> dict:
    """Every model's cells in ``<tool>.json`` without their timing."""
    with open(osp.join(work, f'{tool}.json')) as f:
        models = json.load(f)['models']
    return {
        name: {
            key: {
                k: v
                for k, v in cell.items() if k not in TIMING
            }
            for key, cell in model['cells'].items()
        }
        for name, model in models.items()
    }


@pytest.mark.parametrize('tool', ['robustness', 'adversarial', 'certify'])
def test_the_grids_on_two_slurm_tasks_match_one_process(
        slurm, demo_models, tmp_path, tool) -> None:
    if tool == 'robustness':
        pytest.importorskip('imagecorruptions')
    args = [*demo_models, *GRIDS[tool], '--names', 'ell', 'dot']
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    run_command([
        sys.executable, f'tools/analysis_tools/{tool}.py', *args, '--work-dir',
        one
    ],
                timeout=400)
    proc = run_command([
        'bash', f'tools/slurm_{tool}.sh', slurm.partition, tool, *args,
        '--work-dir', two
    ],
                       env=slurm.cpu_job_env(WORLD),
                       timeout=400)
    assert '--ntasks=2' in proc.stderr and '--gres' not in proc.stderr
    expected = cells(one, tool)
    assert len(expected['ell']) == 2  # clean and one perturbation
    assert json.dumps(cells(two, tool)) == json.dumps(expected)
    for name, model in expected.items():
        for key in model:
            with np.load(osp.join(one, 'areas', name, f'{key}.npz')) as a, \
                    np.load(osp.join(two, 'areas', name, f'{key}.npz')) as b:
                assert sorted(a.files) == sorted(b.files)
                for array in a.files:
                    assert np.array_equal(a[array],
                                          b[array]), (name, key, array)
