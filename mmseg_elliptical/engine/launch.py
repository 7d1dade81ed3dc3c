"""Run mmseg's tools with the plugin, also ``--launcher pytorch|slurm``
without CUDA (gloo; docs/reliability.md, "Multi-GPU and Slurm")."""
import gc
import logging
import os
import runpy
import subprocess
import sys
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.dist import init_dist
from mmengine.logging import MMLogger, print_log

from ..errors import INPUT_ERRORS, ConfigError
from ..utils import mmseg_tool_path
from ..utils.arguments import fail
from ..utils.mmseg_tools import check_mmseg_tool_command, config_error_line
from ..utils.preflight import check_launcher
from ..utils.registry import check_model_types
from ..utils.unknown_types import unknown_types_as_config_errors

#: The DDP wrapper of a CPU run (torch refuses ``device_ids`` there).
CPU_WRAPPER = dict(
    type='MMDistributedDataParallel', device_ids=None, broadcast_buffers=False)
CPU_WRAPPER_OPTIONS = [
    f'model_wrapper_cfg.{k}={v}' for k, v in CPU_WRAPPER.items()
]


def argv_launcher(argv: Sequence[str]) -> str:
    """The ``--launcher`` value in a tools/train.py or test.py command line."""
    for i, arg in enumerate(argv):
        if arg == '--launcher' and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith('--launcher='):
            return arg.split('=', 1)[1]
    return 'none'


def prepare_cpu_launch(argv: Sequence[str],
                       cuda: Optional[bool] = None) -> List[str]:
    """Set up a ``--launcher pytorch|slurm`` run on CPU: a gloo group from
    torchrun's or Slurm's environment (mmengine 0.10's launchers need CUDA)
    and DDP without ``device_ids``.

    Args:
        argv (Sequence[str]): The tool's command line.
        cuda (bool, optional): Defaults to ``torch.cuda.is_available()``.

    Returns:
        list[str]: ``argv``, with the DDP options added on CPU.
    """
    argv = list(argv)
    if cuda is None:
        cuda = torch.cuda.is_available()
    launcher = argv_launcher(argv)
    if cuda or launcher == 'none':
        return argv
    if launcher == 'slurm':
        slurm_environment()
    elif launcher != 'pytorch':
        raise RuntimeError(
            f'--launcher {launcher} needs CUDA devices with mmengine 0.10; on '
            'a machine without GPUs use --launcher pytorch (tools/dist_*.sh) '
            'or slurm (tools/slurm_*.sh), gloo backend.')
    init_cpu_group()
    return argv + ['--cfg-options', *CPU_WRAPPER_OPTIONS]


def slurm_port(job_id: str) -> int:
    """The rendezvous port of a Slurm job without ``MASTER_PORT``: one of
    20000-39999 from the job id, so two jobs on one node do not meet."""
    return 20000 + int(job_id) % 20000 if job_id.isdigit() else 29500


def slurm_environment() -> None:
    """torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``) from Slurm's, as mmengine's slurm
    launcher sets them, in a task started by ``srun``; ``MASTER_ADDR`` and
    ``MASTER_PORT`` already set are kept.

    Raises:
        ConfigError: Not in a Slurm task (no ``SLURM_PROCID``).
    """
    env = os.environ
    check_launcher('slurm')
    if 'MASTER_ADDR' not in env:
        nodes = env.get('SLURM_STEP_NODELIST', env.get('SLURM_NODELIST', ''))
        hosts = subprocess.run(['scontrol', 'show', 'hostnames', nodes],
                               capture_output=True,
                               text=True).stdout.split()
        env['MASTER_ADDR'] = hosts[0] if hosts else '127.0.0.1'
    env.setdefault('MASTER_PORT', str(slurm_port(env.get('SLURM_JOB_ID', ''))))
    env['RANK'] = env['SLURM_PROCID']
    env['WORLD_SIZE'] = env['SLURM_NTASKS']
    env['LOCAL_RANK'] = env.get('SLURM_LOCALID', '0')


def init_cpu_group() -> None:
    """Join torchrun's (or :func:`slurm_environment`'s) process group on
    the CPU (gloo), once."""
    if 'RANK' not in os.environ:
        check_launcher('pytorch')
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')


def start_launcher(launcher: str,
                   cuda: Optional[bool] = None) -> Dict[str, object]:
    """Join the process group of ``--launcher``, for a tool that builds its
    own runners.

    Args:
        launcher (str): ``'none'``, ``'pytorch'`` or ``'slurm'``.
        cuda (bool, optional): Defaults to ``torch.cuda.is_available()``.

    Returns:
        dict: Options to merge into every config the tool runs.
    """
    if launcher == 'none':
        return {}
    if cuda is None:
        cuda = torch.cuda.is_available()
    if cuda:
        if not dist.is_initialized():
            init_dist(launcher)
    else:
        prepare_cpu_launch(['--launcher', launcher], cuda=False)
    quiet_other_ranks(int(os.environ.get('RANK', '0')))
    return {'launcher': launcher} if cuda else \
        {'launcher': launcher, 'model_wrapper_cfg': dict(CPU_WRAPPER)}


def quiet_other_ranks(rank: int) -> None:
    """Let only rank 0 print INFO and WARNING lines: mmengine does so for
    the loggers created after the process group, this for those created
    before it (at import, or by the tool)."""
    if rank == 0:
        return
    for logger in MMLogger._instance_dict.values():
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler:
                handler.setLevel(logging.ERROR)


def end_process_group(synchronize: bool = False) -> None:
    """Destroy the default process group, if any (left alive, gloo's
    threads can abort a finished job); errors are logged, not raised.

    Args:
        synchronize (bool): Wait for every rank first (a finished job: rank 0
            may still be writing its results, and a rank that destroys its
            group while a peer still holds theirs can hang the teardown).
            Not after an error, when a peer may never arrive.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    steps = ([dist.barrier] if synchronize else []) + \
        [dist.destroy_process_group]
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001  # the job's outcome wins
            print_log(
                f'mmseg_elliptical: ending the process group failed '
                f'({step.__name__}): {exc!r}',
                logger='current',
                level=logging.WARNING)
    # DDP's reducer holds the group in reference cycles: free them, so gloo
    # joins its threads before interpreter shutdown.
    gc.collect()


@contextmanager
def ending_process_group() -> Iterator[None]:
    """End the process group, if any, when the block ends: after a finished
    block the ranks wait for each other first, after an error it ends at
    once (:func:`end_process_group`)."""
    try:
        yield
    except BaseException:
        end_process_group()
        raise
    end_process_group(synchronize=True)


@contextmanager
def process_group(launcher: str) -> Iterator[Dict[str, object]]:
    """The process group of ``--launcher`` (:func:`start_launcher`) for the
    ``with`` block of a tool, ended by :func:`ending_process_group`.

    Yields:
        dict: Options to merge into every config the tool runs.
    """
    options = start_launcher(launcher)
    with ending_process_group():
        yield options


def check_mmseg_tool_args(name: str, argv: Sequence[str]) -> None:
    """Check the command line of mmseg's ``tools/<name>``: what
    :func:`~..utils.mmseg_tools.check_mmseg_tool_command` checks, then the
    config's types in the registries; a bad one ends the tool with one line
    and status 2."""
    parsed, cfg = check_mmseg_tool_command(name, argv)
    try:
        check_model_types(cfg)
    except ConfigError as e:
        fail(config_error_line(parsed.config, e))


def run_mmseg_tool(name: str) -> None:
    """Execute mmseg's ``tools/<name>`` as ``__main__`` (reads ``sys.argv``);
    the plugin's input errors end it with one line and status 2."""
    check_mmseg_tool_args(name, sys.argv)
    try:
        check_launcher(argv_launcher(sys.argv), name)
    except ConfigError as e:
        fail(str(e))
    try:
        sys.argv = prepare_cpu_launch(sys.argv)
    except ConfigError as e:
        fail(str(e))
    try:
        with ending_process_group(), unknown_types_as_config_errors():
            runpy.run_path(mmseg_tool_path(name), run_name='__main__')
    except INPUT_ERRORS as error:
        fail(str(error))
