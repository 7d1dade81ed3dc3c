"""``engine/launch.py``: multi-process training on CPU (gloo), the CPU
launcher's options, and the end of the process group.

One step on 2 processes with 1 image each must give the gradients of 1
process with both images (DDP averages gradients; the loss is a mean over
equally many pixels per image), in float64: a batch of 1 and of 2 round
otherwise, and in float32 by how much depends on the CPU's kernels (within
1e-6 on one CPU). Measured in float64: 2.9e-12 at most (gradients up to
0.2); the test allows 1e-9.
"""
import faulthandler
import logging
import os
import os.path as osp
import subprocess
import sys
import time
from datetime import timedelta
from typing import Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from builders import SEGMENTOR_NO_DROPOUT, build_segmentor, seg_samples
from mmengine.logging import MMLogger
from mmengine.model import MMDistributedDataParallel
from processes import LAUNCH_VARIABLES, free_port, run_command
from torch import Tensor

from mmseg_elliptical.engine.launch import end_process_group
from mmseg_elliptical.errors import ConfigError

pytestmark = pytest.mark.usefixtures('single_thread')

WORLD = 2
NUM_CLASSES = 5
WORKER_TIMEOUT_S = 180  # a worker takes ~10 s


def batch() -> Tuple[Tensor, List]:
    """Two normalised images with random labels (no ignored pixels)."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(WORLD, 3, 64, 64, generator=gen, dtype=torch.float64)
    return images, seg_samples(WORLD, 64, 64, NUM_CLASSES, generator=gen)


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
        module=build_segmentor(**SEGMENTOR_NO_DROPOUT).double(),
        broadcast_buffers=False)
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


@pytest.mark.slow  # torch.multiprocessing, gloo
def test_two_processes_match_one_process(tmp_path) -> None:
    run_workers(str(tmp_path))
    ref = step(build_segmentor(**SEGMENTOR_NO_DROPOUT).double(), *batch())
    assert 'backbone.layers.2.attn.attn.in_proj_weight' in ref
    assert 'decode_head.layers.1.attn.attn.in_proj_weight' in ref
    for rank in range(WORLD):
        grads = torch.load(osp.join(tmp_path, f'rank{rank}.pt'))
        assert grads.keys() == ref.keys()
        for name, g in ref.items():
            torch.testing.assert_close(
                grads[name], g, rtol=0, atol=1e-9, msg=f'rank {rank}, {name}')
    # Sanity: one image alone gives other gradients (DDP did reduce).
    single = step(
        build_segmentor(**SEGMENTOR_NO_DROPOUT).double(),
        *[b[:1] for b in batch()])
    name = 'backbone.layers.2.attn.attn.in_proj_weight'
    assert not torch.allclose(single[name], ref[name], atol=1e-6)


def test_prepare_cpu_launch_options(monkeypatch) -> None:
    from mmseg_elliptical.engine.launch import (CPU_WRAPPER_OPTIONS,
                                                argv_launcher,
                                                prepare_cpu_launch)
    argv = ['train.py', 'cfg.py', '--launcher', 'pytorch']
    assert argv_launcher(argv) == 'pytorch'
    assert argv_launcher(['train.py', '--launcher=slurm']) == 'slurm'
    assert argv_launcher(['train.py', 'cfg.py']) == 'none'
    # With CUDA, or without a launcher, the command line is left alone.
    assert prepare_cpu_launch(argv, cuda=True) == argv
    assert prepare_cpu_launch(['t.py', 'c.py'], cuda=False) == ['t.py', 'c.py']
    with pytest.raises(RuntimeError, match='--launcher mpi needs CUDA'):
        prepare_cpu_launch(['t.py', '--launcher', 'mpi'], cuda=False)
    monkeypatch.delenv('SLURM_PROCID', raising=False)
    with pytest.raises(ConfigError, match='task started by srun'):
        prepare_cpu_launch(['t.py', '--launcher', 'slurm'], cuda=False)
    monkeypatch.delenv('RANK', raising=False)
    with pytest.raises(ConfigError, match='environment torchrun sets'):
        prepare_cpu_launch(argv, cuda=False)
    # In a torchrun process the gloo group is set up and DDP gets no
    # device_ids (mmengine merges the repeated --cfg-options).
    monkeypatch.setattr(dist, 'is_initialized', lambda: True)
    monkeypatch.setenv('RANK', '0')
    out = prepare_cpu_launch(argv + ['--cfg-options', 'a=1'], cuda=False)
    assert out[-len(CPU_WRAPPER_OPTIONS) -
               1:] == ['--cfg-options', *CPU_WRAPPER_OPTIONS]
    assert 'model_wrapper_cfg.device_ids=None' in out


def test_slurm_environment_becomes_torchruns(monkeypatch) -> None:
    from mmseg_elliptical.engine import launch

    # slurm_environment writes os.environ itself: each variable is set
    # through monkeypatch first, so that what it writes is undone after the
    # test (delenv of an unset variable records nothing to undo: its
    # MASTER_ADDR=node07 stayed and sent the torchrun of later tests'
    # tools/dist_test.sh there, issue 61).
    for key in (*LAUNCH_VARIABLES, 'SLURM_STEP_NODELIST'):
        monkeypatch.setenv(key, '')
        monkeypatch.delenv(key)
    monkeypatch.setenv('SLURM_PROCID', '3')
    monkeypatch.setenv('SLURM_NTASKS', '4')
    monkeypatch.setenv('SLURM_LOCALID', '1')
    monkeypatch.setenv('SLURM_NODELIST', 'node[07-08]')
    monkeypatch.setenv('SLURM_JOB_ID', '123456')
    asked = []

    def scontrol(args, **kwargs):
        asked.append(args)
        return subprocess.CompletedProcess(args, 0, 'node07\nnode08\n', '')

    monkeypatch.setattr(launch.subprocess, 'run', scontrol)
    launch.slurm_environment()
    assert asked == [['scontrol', 'show', 'hostnames', 'node[07-08]']]
    env = {k: os.environ[k] for k in LAUNCH_VARIABLES}
    assert env == dict(
        MASTER_ADDR='node07',
        MASTER_PORT=str(20000 + 123456 % 20000),
        RANK='3',
        WORLD_SIZE='4',
        LOCAL_RANK='1')
    # Set by the user: kept.
    monkeypatch.setenv('MASTER_PORT', '29999')
    monkeypatch.setenv('MASTER_ADDR', 'head')
    launch.slurm_environment()
    assert (os.environ['MASTER_ADDR'], os.environ['MASTER_PORT']) == ('head',
                                                                      '29999')
    assert len(asked) == 1


THREADS_AFTER_END = r'''
import os, sys, time
import torch, torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmseg_elliptical.engine.launch import end_process_group
from mmseg_elliptical.errors import ConfigError

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
# A thread told to stop may still be listed for a moment on a busy machine
# (seen once on two test workers: 2 for 1); without end_process_group the
# gloo threads stay until the abort at shutdown, so a deadline still tells.
deadline = time.monotonic() + 10
while native_threads() > before and time.monotonic() < deadline:
    time.sleep(0.05)
print(before, during, native_threads(), dist.is_initialized())
end_process_group()              # no group: a no-op
'''


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(not osp.isdir('/proc/self/task'), reason='needs /proc')
def test_end_process_group_joins_gloo_threads() -> None:
    # Gloo's threads outliving the tool meet interpreter shutdown and abort
    # the process ('terminate called without an active exception').
    proc = run_command([sys.executable, '-c', THREADS_AFTER_END % free_port()])
    before, during, after, initialized = proc.stdout.splitlines()[-1].split()
    assert int(during) > int(before), 'gloo started no threads?'
    assert int(after) == int(before), (before, during, after)
    assert initialized == 'False'


@pytest.mark.parametrize('outcome', ['finished', 'failed'])
def test_run_mmseg_tool_ends_the_group(monkeypatch, outcome) -> None:
    """A finished tool waits for its peers before the group ends; a failed
    one ends it at once."""
    from mmseg_elliptical.engine import launch as mmseg_tools

    calls = []
    monkeypatch.setattr(
        'mmseg_elliptical.engine.launch.end_process_group',
        lambda synchronize=False: calls.append(synchronize))

    def tool(path, run_name):
        if outcome == 'failed':
            raise SystemExit(3)

    monkeypatch.setattr(mmseg_tools.runpy, 'run_path', tool)
    monkeypatch.setattr(mmseg_tools, 'check_mmseg_tool_args',
                        lambda *args: None)  # tests/test_tools/test_bad_input
    monkeypatch.setattr(sys, 'argv', ['train.py', 'cfg.py'])
    if outcome == 'failed':
        with pytest.raises(SystemExit) as exc:
            mmseg_tools.run_mmseg_tool('train.py')
        assert exc.value.code == 3 and calls == [False]
    else:
        mmseg_tools.run_mmseg_tool('train.py')
        assert calls == [True]


def test_process_group_synchronizes_only_a_finished_block(monkeypatch) -> None:
    from mmseg_elliptical.engine import launch

    calls = []
    monkeypatch.setattr(
        launch,
        'end_process_group',
        lambda synchronize=False: calls.append(synchronize))
    with launch.process_group('none') as options:
        assert options == {}
    assert calls == [True]
    with pytest.raises(KeyError):
        with launch.process_group('none'):
            raise KeyError('a failing tool')
    assert calls == [True, False]


def group_calls(monkeypatch, fail_at: str = '') -> list:
    """Patch the group's barrier and destroy to record their calls (the one
    named ``fail_at`` raises); returns the record."""
    from mmseg_elliptical.engine import launch
    calls = []

    def step(name):

        def call():
            calls.append(name)
            if name == fail_at:
                raise RuntimeError('gloo is gone')

        call.__name__ = name
        return call

    monkeypatch.setattr(launch.dist, 'is_initialized', lambda: True)
    monkeypatch.setattr(launch.dist, 'barrier', step('barrier'))
    monkeypatch.setattr(launch.dist, 'destroy_process_group',
                        step('destroy_process_group'))
    return calls


def test_end_process_group_waits_for_the_peers_when_asked(monkeypatch) -> None:
    from mmseg_elliptical.engine import launch
    calls = group_calls(monkeypatch)
    launch.end_process_group(synchronize=True)
    assert calls == ['barrier', 'destroy_process_group']
    calls.clear()
    launch.end_process_group()
    assert calls == ['destroy_process_group']


@pytest.mark.parametrize('fail_at', ['barrier', 'destroy_process_group'])
def test_a_failed_end_is_logged_not_raised(monkeypatch, fail_at) -> None:
    from mmseg_elliptical.engine import launch
    calls = group_calls(monkeypatch, fail_at)
    logged = []
    monkeypatch.setattr(
        launch,
        'print_log',
        lambda msg, logger=None, level=None: logged.append((msg, level)))
    launch.end_process_group(synchronize=True)  # the job's outcome wins
    assert calls == ['barrier', 'destroy_process_group']
    assert logged == [(f"mmseg_elliptical: ending the process group failed "
                       f"({fail_at}): RuntimeError('gloo is gone')",
                       logging.WARNING)]
