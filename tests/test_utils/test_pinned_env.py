"""One demo number on every host: the environment that pins torch's threads
and CPU kernels (``utils/pinned_env.py``), the Makefile's demo runs in it,
and the demo's first losses under it are the recorded ones, bit for bit."""
import json
import os.path as osp
import subprocess

import pytest
from builders import ROOT
from demo_losses import pinned_losses

from mmseg_elliptical.utils.pinned_env import (KERNELS, THREAD_VARIABLES,
                                               assignments, pinned_env)

RECORDED = osp.join(ROOT, 'tests', 'demo_losses.json')


def test_the_environment_pins_threads_and_kernels():
    env = pinned_env({'OMP_NUM_THREADS': '2', 'HOME': '/h'})
    assert env == dict(
        HOME='/h',
        OMP_NUM_THREADS='1',
        MKL_NUM_THREADS='1',
        ATEN_CPU_CAPABILITY='avx2',
        MKL_CBWR='COMPATIBLE',
        ONEDNN_MAX_CPU_ISA='AVX2')
    assert set(env) - {'HOME'} == {*KERNELS, *THREAD_VARIABLES}
    assert pinned_env({}, threads=2)['OMP_NUM_THREADS'] == '2'


@pytest.mark.parametrize('target', [
    'demo', 'demo-dot', 'compare', 'report', 'adversarial', 'audit', 'demo-at',
    'certify'
])
def test_the_makefiles_demo_runs_are_pinned(target):
    """``make -n`` prints the commands; the training, compare_seeds or the
    adversarial grid (whose runs and torchrun's processes inherit its
    environment) starts with every pinned variable."""
    proc = subprocess.run(['make', '-n', target],
                          cwd=ROOT,
                          capture_output=True,
                          text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    runs = [
        line for line in proc.stdout.splitlines() if any(
            tool in line
            for tool in ('tools/train.py', 'compare_seeds.py',
                         'tools/analysis_tools/adversarial.py',
                         'tools/dist_adversarial.sh', 'tools/dist_certify.sh'))
    ]
    assert runs and all(line.startswith(assignments()) for line in runs), runs


@pytest.mark.slow  # trains the demo for 20 iterations in a subprocess
def test_the_demos_first_losses_are_the_recorded_ones():
    with open(RECORDED) as f:
        recorded = json.load(f)
    got = pinned_losses(recorded['iterations'])
    assert got['settings'] == recorded['settings']
    assert got['losses'] == recorded['losses'], (
        'the pinned demo trains otherwise than when it was recorded '
        f'({recorded["how"]}; on {recorded["recorded_on"]}); here on '
        f'{got["recorded_on"]}')
