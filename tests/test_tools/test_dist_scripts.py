"""mmseg's launch scripts over the plugin's tools: ``tools/dist_test.sh``
on 2 processes reports the metrics of a single-process test, a SIGTERM to
the launch script stops its workers, ``tools/slurm_train.sh`` runs srun in
its place."""
import os
import os.path as osp
import shutil
import signal
import subprocess
import sys
import time

import pytest
from builders import (DEMO_ELLIPTICAL, ROOT, SEGMENTOR_NO_DROPOUT,
                      build_segmentor, tiny_config)
from mmengine.runner import Runner
from mmengine.runner.checkpoint import save_checkpoint
from processes import launch_env, run_command

# torchrun and the launch scripts, in subprocesses
pytestmark = [pytest.mark.usefixtures('single_thread'), pytest.mark.slow]

WORLD = 2


def test_dist_test_sh_matches_single_process(demo_root, tmp_path) -> None:
    cfg = tiny_config(
        DEMO_ELLIPTICAL,
        demo_root,
        str(tmp_path / 'single'),
        experiment_name='ddp_single_test')
    cfg_file = str(tmp_path / 'tiny.py')
    cfg.dump(cfg_file)
    model = build_segmentor(**SEGMENTOR_NO_DROPOUT)
    ckpt = str(tmp_path / 'model.pth')
    save_checkpoint({'state_dict': model.state_dict(), 'meta': {}}, ckpt)

    single = Runner.from_cfg(cfg)
    single.load_checkpoint(ckpt)
    expected = single.test()

    env = launch_env()
    proc = run_command([
        'bash', 'tools/dist_test.sh', cfg_file, ckpt,
        str(WORLD), '--work-dir',
        str(tmp_path / 'dist')
    ],
                       env=env)
    log = proc.stdout + proc.stderr
    assert 'Distributed launcher: pytorch' in log
    # Each rank tested half of the 4 validation images...
    assert 'Iter(test) [2/2]' in log and 'Iter(test) [4/4]' not in log
    # ...and the collected metrics are the single process's.
    line = [
        ln for ln in log.splitlines()
        if 'Iter(test) [2/2]' in ln and 'mIoU' in ln
    ][-1]
    for key in ('aAcc', 'mIoU', 'mAcc'):
        assert f'{key}: {expected[key]:.4f}' in line, (key, expected, line)


SLEEPER = """
import os, sys, time
open(os.path.join(sys.argv[-1], str(os.getpid())), 'w').close()
time.sleep(300)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def copy_launch_scripts(tools) -> None:
    """dist_launch.sh and slurm_launch.sh with the file they source, in a
    ``tools`` folder of another project."""
    (tools / 'misc').mkdir(parents=True, exist_ok=True)
    for script in ('dist_launch.sh', 'slurm_launch.sh', 'misc/python.sh'):
        shutil.copy(osp.join(ROOT, 'tools', script), tools / script)


@pytest.mark.skipif(not osp.isdir('/proc/self'), reason='needs /proc')
def test_sigterm_to_the_launch_script_stops_the_workers(tmp_path) -> None:
    # The real script, launching a tool that records its pid and sleeps.
    tools = tmp_path / 'tools'
    copy_launch_scripts(tools)
    (tools / 'sleep.py').write_text(SLEEPER)
    pids = tmp_path / 'pids'
    pids.mkdir()
    # The sleeper has no arguments to check.
    env = launch_env(MMSEG_ELLIPTICAL_SKIP_CHECK='1')
    launcher = subprocess.Popen([
        'bash',
        str(tools / 'dist_launch.sh'), 'sleep.py',
        str(WORLD),
        str(pids)
    ],
                                env=env,
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(os.listdir(pids)) < WORLD:
            assert time.monotonic() < deadline, 'the workers did not start'
            time.sleep(0.2)
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(60)
        workers = [int(p) for p in os.listdir(pids)]
        deadline = time.monotonic() + 30
        while any(running(pid) for pid in workers):
            assert time.monotonic() < deadline, 'workers left running'
            time.sleep(0.2)
    finally:  # whatever is left: torchrun's group, then each worker
        for kill, pid in [(os.killpg, launcher.pid)
                          ] + [(os.kill, int(p)) for p in os.listdir(pids)]:
            try:
                kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        launcher.wait()


FAKE_SRUN = """#!/usr/bin/env bash
echo "pid=$$"
echo "PYTHONPATH=$PYTHONPATH"
printf '%s\\n' "$@"
"""


def test_slurm_train_sh_runs_srun_in_its_place(tmp_path) -> None:
    # A fake srun first on PATH prints its pid, PYTHONPATH and arguments.
    srun = tmp_path / 'srun'
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f'{tmp_path}:{os.environ["PATH"]}',
        GPUS='8',
        PYTHON='py')
    proc = subprocess.Popen([
        'bash',
        osp.join(ROOT, 'tools', 'slurm_train.sh'), 'part', 'job', 'cfg.py',
        '--resume'
    ],
                            env=env,
                            stdout=subprocess.PIPE,
                            text=True)
    out = proc.communicate(timeout=60)[0].splitlines()
    assert proc.returncode == 0
    assert out[0] == f'pid={proc.pid}'  # exec: a signal reaches srun
    assert out[1].startswith(f'PYTHONPATH={ROOT}:')
    args = out[2:]
    assert args[:2] == ['-p', 'part'] and '--job-name=job' in args
    assert '--ntasks=8' in args and '--kill-on-bad-exit=1' in args
    assert args[-6:] == [
        'py', '-u',
        osp.join(ROOT, 'tools', 'train.py'), '--launcher=slurm', 'cfg.py',
        '--resume'
    ]


def test_slurm_robustness_sh_runs_srun_in_its_place(tmp_path) -> None:
    srun = tmp_path / 'srun'
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    env = dict(
        os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}', PYTHON='py')
    proc = subprocess.Popen([
        'bash',
        osp.join(ROOT, 'tools', 'slurm_robustness.sh'), 'part', 'job', 'a.py',
        'a.pth', 'b.py', 'b.pth', '--protocol', 'paper'
    ],
                            env=env,
                            stdout=subprocess.PIPE,
                            text=True)
    out = proc.communicate(timeout=60)[0].splitlines()
    assert proc.returncode == 0 and out[0] == f'pid={proc.pid}'
    assert '--ntasks=4' in out and '--job-name=job' in out
    assert out[-10:] == [
        'py', '-u',
        osp.join(ROOT, 'tools', 'analysis_tools',
                 'robustness.py'), '--launcher=slurm', 'a.py', 'a.pth', 'b.py',
        'b.pth', '--protocol', 'paper'
    ]


@pytest.mark.parametrize('script, args',
                         [('dist_robustness.sh', ['2']),
                          ('slurm_robustness.sh', ['part', 'job', 'a.py'])])
def test_robustness_scripts_need_their_arguments(script, args) -> None:
    proc = subprocess.run(
        ['bash', osp.join(ROOT, 'tools', script), *args],
        capture_output=True,
        text=True,
        timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith('usage: ')
    assert 'CONFIG CHECKPOINT [CONFIG CHECKPOINT ...]' in proc.stderr


@pytest.mark.parametrize('script, args, expected', [
    ('dist_robustness.sh', ['2', DEMO_ELLIPTICAL, 'missing.pth'],
     'robustness.py: error: argument CONFIG CHECKPOINT: checkpoint '
     'missing.pth does not exist'),
    ('dist_test.sh', [DEMO_ELLIPTICAL, 'missing.pth', '2'],
     'test.py: error: argument checkpoint: missing.pth does not exist'),
    ('dist_robustness.sh', ['two', DEMO_ELLIPTICAL, 'x.pth'],
     "dist_launch.sh: error: NPROC 'two' is not a positive integer"),
])
def test_a_bad_argument_stops_the_launch_before_torchrun(
        script, args, expected) -> None:
    # Checked once (tools/check_args.py) before torchrun starts its
    # processes: the tool's one line, status 2, no ChildFailedError.
    proc = subprocess.run(
        ['bash', osp.join(ROOT, 'tools', script), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1'),
        capture_output=True,
        text=True,
        timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert expected in proc.stderr, proc.stderr[-2000:]
    for sign in ('Traceback', 'ChildFailedError', 'torch.distributed'):
        assert sign not in proc.stderr, proc.stderr[-2000:]


def test_a_checkpoint_that_does_not_fit_stops_the_launch(
        demo_models, other_vit) -> None:
    proc = subprocess.run([
        'bash',
        osp.join(ROOT, 'tools', 'dist_robustness.sh'), '2', demo_models[0],
        other_vit
    ],
                          cwd=ROOT,
                          env=dict(
                              os.environ,
                              PYTHON=sys.executable,
                              OMP_NUM_THREADS='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert ('robustness.py: error: argument CONFIG CHECKPOINT: Checkpoint '
            f'{other_vit} does not fit the model of') in proc.stderr
    for sign in ('Traceback', 'ChildFailedError', 'torch.distributed'):
        assert sign not in proc.stderr, proc.stderr[-2000:]


def fake_program(path, name: str) -> None:
    """An executable that prints its name and arguments, one a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/usr/bin/env bash\necho {name}\nprintf "%s\\n" "$@"\n')
    path.chmod(0o755)


@pytest.mark.parametrize('python, venv, expected', [
    ('', True, 'venv'),
    ('', False, 'path'),
    ('chosen', True, 'chosen'),
])
def test_the_launch_scripts_say_which_python_they_use(tmp_path, python, venv,
                                                      expected) -> None:
    # A copy of the scripts in a project folder with (or without) its .venv;
    # fake python, srun and chosen interpreter print their arguments.
    root = tmp_path / 'project'
    copy_launch_scripts(root / 'tools')
    paths = dict(
        venv=root / '.venv' / 'bin' / 'python',
        path=tmp_path / 'bin' / 'python',
        chosen=tmp_path / 'chosen' / 'python')
    for name, path in paths.items():
        if venv or name != 'venv':
            fake_program(path, name)
    (tmp_path / 'bin' / 'srun').write_text(FAKE_SRUN)
    (tmp_path / 'bin' / 'srun').chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHON'}
    env['PATH'] = f'{tmp_path / "bin"}:{env["PATH"]}'
    if python:
        env['PYTHON'] = str(paths['chosen'])
    shown = str(paths[expected]) if expected != 'path' else 'python'
    for script, args in (('dist_launch.sh', ['train.py', '2', 'cfg.py']),
                         ('slurm_launch.sh', ['train.py', 'part', 'job'])):
        proc = subprocess.run(
            ['bash', str(root / 'tools' / script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout.splitlines()
        assert f'{script}: using {shown} (' in proc.stderr, proc.stderr
        ran = [line for line in out if line in paths]
        if script == 'dist_launch.sh':  # check_args.py, then torchrun
            assert ran == [expected, expected], out
            second = len(out) - 1 - out[::-1].index(expected)
            assert out[second + 1:second +
                       3] == ['-m', 'torch.distributed.run'], out
        else:
            assert ran == [] and shown in out, out


def test_only_rank_0_prints_info_lines(demo_models, tmp_path) -> None:
    pytest.importorskip('imagecorruptions')
    proc = run_command([
        'bash', 'tools/dist_robustness.sh', '2', *demo_models, '--corruptions',
        'gaussian_noise', '--severities', '1', '--max-images', '2',
        '--work-dir',
        str(tmp_path)
    ],
                       env=launch_env(MMSEG_ELLIPTICAL_SKIP_CHECK='1'))
    log = proc.stdout + proc.stderr
    info = [
        line.split(' - INFO - ', 1)[1] for line in log.splitlines()
        if ' - INFO - ' in line
    ]
    assert any('cells (2 models)' in line for line in info), log[-3000:]
    assert len(info) == len(set(info)), info
