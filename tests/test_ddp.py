"""Multi-process training and testing on CPU (gloo).

One step on 2 processes with 1 image each must give the gradients of 1
process with both images (DDP averages gradients; the loss is a mean over
equally many pixels per image), and ``tools/dist_test.sh`` on 2 processes
must report the metrics of a single-process test.
"""
import faulthandler
import logging
import os
import os.path as osp
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from typing import Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import DEMO_ELLIPTICAL, ROOT, run_command, tiny_config
from mmengine.logging import MMLogger
from mmengine.model import MMDistributedDataParallel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import save_checkpoint
from mmengine.structures import PixelData
from torch import Tensor

from mmseg_elliptical.engine.launch import end_process_group

pytestmark = pytest.mark.usefixtures('single_thread')

WORLD = 2
NUM_CLASSES = 5
WORKER_TIMEOUT_S = 180  # a worker takes ~10 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def build_segmentor() -> torch.nn.Module:
    """The tiny elliptical segmentor, seeded, without any dropout."""
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    cfg = tiny_config(
        DEMO_ELLIPTICAL, 'unused', 'unused', **{
            'model.backbone.drop_path_rate': 0.0,
            'model.backbone.drop_rate': 0.0,
            'model.backbone.attn_drop_rate': 0.0,
            'model.decode_head.type': 'EllipticalMaskTransformerHead',
            'model.decode_head.drop_path_rate': 0.0,
            'model.decode_head.dropout_ratio': 0.0,
        })
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.train()


def batch() -> Tuple[Tensor, List]:
    """Two normalised images with random labels (no ignored pixels)."""
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(WORLD, 3, 64, 64, generator=gen)
    samples = []
    for _ in range(WORLD):
        sample = SegDataSample()
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, NUM_CLASSES, (1, 64, 64), generator=gen))
        sample.set_metainfo(
            dict(img_shape=(64, 64), ori_shape=(64, 64), pad_shape=(64, 64)))
        samples.append(sample)
    return images, samples


def step(model: torch.nn.Module, images: Tensor,
         samples: List) -> Dict[str, Tensor]:
    """Forward in 'loss' mode, backward; the gradients by name."""
    losses = model(images, samples, mode='loss')
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    inner = model.module if hasattr(model, 'module') else model
    return {
        n: p.grad.detach().clone()
        for n, p in inner.named_parameters() if p.grad is not None
    }


def rank_gradients(rank: int) -> Dict[str, Tensor]:
    """One step of this rank's image through MMDistributedDataParallel."""
    model = MMDistributedDataParallel(
        module=build_segmentor(), broadcast_buffers=False)
    images, samples = batch()
    return step(model, images[rank:rank + 1], samples[rank:rank + 1])


def ddp_worker(rank: int, out_dir: str) -> None:
    """One rank: its gradients saved to ``out_dir``, its output to a log.

    The group ends as the tools end theirs (``end_process_group``), after
    the DDP model has gone out of scope. A hang prints every thread's stack
    to the log and ends the process.
    """
    log = open(osp.join(out_dir, f'rank{rank}.log'), 'w', buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True, file=log)
    MMLogger.get_current_instance().setLevel(logging.WARNING)  # init logs
    torch.set_num_threads(1)
    # A file store: no free port to race for, no store served by rank 0.
    store = osp.join(out_dir, 'store')
    dist.init_process_group(
        'gloo',
        init_method=f'file://{store}',
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120))
    print(f'rank {rank}: group initialised', file=log)
    try:
        grads = rank_gradients(rank)
        torch.save(grads, osp.join(out_dir, f'rank{rank}.pt'))
        print(f'rank {rank}: gradients saved', file=log)
    finally:
        end_process_group()
        print(f'rank {rank}: group ended', file=log)


def run_workers(out_dir: str) -> None:
    """Both ranks to the end; on a failure or hang, their logs' tails."""

    def fail(why: str) -> None:
        tails = []
        for rank in range(WORLD):
            path = osp.join(out_dir, f'rank{rank}.log')
            text = open(path).read() if osp.exists(path) else '(no log)'
            tails.append(f'--- rank {rank}, exit code '
                         f'{context.processes[rank].exitcode}:\n'
                         f'{text[-3000:]}')
        pytest.fail('\n'.join([why, *tails]), pytrace=False)

    # spawn, not fork: a child forked from this process, whose OpenMP
    # thread pool other tests have started, can deadlock in its first
    # OpenMP call (seen once in a full run).
    context = mp.start_processes(
        ddp_worker,
        args=(out_dir, ),
        nprocs=WORLD,
        start_method='spawn',
        join=False)
    deadline = time.monotonic() + WORKER_TIMEOUT_S + 30
    try:
        while not context.join(timeout=2):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                    process.join()
                fail(f'the DDP workers did not exit in '
                     f'{WORKER_TIMEOUT_S + 30} s')
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as exc:
        error = f'a DDP worker failed: {exc}'
    else:
        return
    fail(error)


def test_two_processes_match_one_process(tmp_path) -> None:
    run_workers(str(tmp_path))
    ref = step(build_segmentor(), *batch())
    assert 'backbone.layers.2.attn.attn.in_proj_weight' in ref
    assert 'decode_head.layers.1.attn.attn.in_proj_weight' in ref
    for rank in range(WORLD):
        grads = torch.load(osp.join(tmp_path, f'rank{rank}.pt'))
        assert grads.keys() == ref.keys()
        for name, g in ref.items():
            torch.testing.assert_close(
                grads[name], g, rtol=0, atol=1e-6, msg=f'rank {rank}, {name}')
    # Sanity: one image alone gives other gradients (DDP did reduce).
    single = step(build_segmentor(), *[b[:1] for b in batch()])
    name = 'backbone.layers.2.attn.attn.in_proj_weight'
    assert not torch.allclose(single[name], ref[name], atol=1e-6)


def test_dist_test_sh_matches_single_process(demo_root, tmp_path) -> None:
    cfg = tiny_config(
        DEMO_ELLIPTICAL,
        demo_root,
        str(tmp_path / 'single'),
        experiment_name='ddp_single_test')
    cfg_file = str(tmp_path / 'tiny.py')
    cfg.dump(cfg_file)
    model = build_segmentor()
    ckpt = str(tmp_path / 'model.pth')
    save_checkpoint({'state_dict': model.state_dict(), 'meta': {}}, ckpt)

    single = Runner.from_cfg(cfg)
    single.load_checkpoint(ckpt)
    expected = single.test()

    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(free_port()),
        OMP_NUM_THREADS='1')
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


@pytest.mark.skipif(not osp.isdir('/proc/self'), reason='needs /proc')
def test_sigterm_to_the_launch_script_stops_the_workers(tmp_path) -> None:
    # The real script, launching a tool that records its pid and sleeps.
    tools = tmp_path / 'tools'
    tools.mkdir()
    shutil.copy(osp.join(ROOT, 'tools', 'dist_launch.sh'), tools)
    (tools / 'sleep.py').write_text(SLEEPER)
    pids = tmp_path / 'pids'
    pids.mkdir()
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(free_port()))
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


def test_prepare_cpu_launch_options(monkeypatch) -> None:
    from mmseg_elliptical.engine.launch import (CPU_WRAPPER_OPTIONS,
                                                launcher_of,
                                                prepare_cpu_launch)
    argv = ['train.py', 'cfg.py', '--launcher', 'pytorch']
    assert launcher_of(argv) == 'pytorch'
    assert launcher_of(['train.py', '--launcher=slurm']) == 'slurm'
    assert launcher_of(['train.py', 'cfg.py']) == 'none'
    # With CUDA, or without a launcher, the command line is left alone.
    assert prepare_cpu_launch(argv, cuda=True) == argv
    assert prepare_cpu_launch(['t.py', 'c.py'], cuda=False) == ['t.py', 'c.py']
    with pytest.raises(RuntimeError, match='--launcher slurm needs CUDA'):
        prepare_cpu_launch(['t.py', '--launcher', 'slurm'], cuda=False)
    monkeypatch.delenv('RANK', raising=False)
    with pytest.raises(RuntimeError, match='environment of torchrun'):
        prepare_cpu_launch(argv, cuda=False)
    # In a torchrun process the gloo group is set up and DDP gets no
    # device_ids (mmengine merges the repeated --cfg-options).
    monkeypatch.setattr(dist, 'is_initialized', lambda: True)
    monkeypatch.setenv('RANK', '0')
    out = prepare_cpu_launch(argv + ['--cfg-options', 'a=1'], cuda=False)
    assert out[-len(CPU_WRAPPER_OPTIONS) -
               1:] == ['--cfg-options', *CPU_WRAPPER_OPTIONS]
    assert 'model_wrapper_cfg.device_ids=None' in out


THREADS_AFTER_END = r'''
import os, sys
import torch, torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmseg_elliptical.engine.launch import end_process_group

def native_threads():
    return len(os.listdir('/proc/self/task'))

before = native_threads()
dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d', rank=0,
                        world_size=1)
model = MMDistributedDataParallel(module=torch.nn.Linear(2, 2))
holder = {'model': model}
holder['self'] = holder          # a reference cycle, as in mmengine's Runner
model(torch.randn(3, 2)).sum().backward()
del model, holder
during = native_threads()
end_process_group()
print(before, during, native_threads(), dist.is_initialized())
end_process_group()              # no group: a no-op
'''


@pytest.mark.skipif(not osp.isdir('/proc/self/task'), reason='needs /proc')
def test_end_process_group_joins_gloo_threads() -> None:
    # Gloo's threads outliving the tool meet interpreter shutdown and abort
    # the process ('terminate called without an active exception').
    proc = run_command([sys.executable, '-c', THREADS_AFTER_END % free_port()])
    before, during, after, initialized = proc.stdout.splitlines()[-1].split()
    assert int(during) > int(before), 'gloo started no threads?'
    assert int(after) == int(before), (before, during, after)
    assert initialized == 'False'


def test_run_mmseg_tool_ends_the_group_on_error(monkeypatch) -> None:
    from mmseg_elliptical.engine import launch as mmseg_tools

    calls = []
    monkeypatch.setattr('mmseg_elliptical.engine.launch.end_process_group',
                        lambda: calls.append('end'))

    def failing_tool(path, run_name):
        raise SystemExit(3)

    monkeypatch.setattr(mmseg_tools.runpy, 'run_path', failing_tool)
    monkeypatch.setattr(sys, 'argv', ['train.py', 'cfg.py'])
    with pytest.raises(SystemExit) as exc:
        mmseg_tools.run_mmseg_tool('train.py')
    assert exc.value.code == 3 and calls == ['end']
