"""Run mmseg's tools with the plugin, also ``--launcher pytorch`` without CUDA.

:func:`run_mmseg_tool` runs a script mmseg's wheel ships (``tools/train.py``
and ``tools/test.py`` of this repository call it), found by
:func:`mmseg_tool_path` where mmengine finds ``mmseg::`` configs.

mmengine 0.10's PyTorch launcher calls ``torch.cuda.set_device`` (an
``AttributeError`` on a CPU-only torch) before ``init_process_group`` with the
config's backend (``nccl`` in mmseg's runtime), and the Runner wraps the model
in ``MMDistributedDataParallel(device_ids=[LOCAL_RANK])``, which torch refuses
for a CPU module. Without CUDA, :func:`prepare_cpu_launch` therefore

* initialises the process group itself, with ``gloo`` from the ``torchrun``
  environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``), so
  the Runner finds it initialised and skips mmengine's launcher; and
* adds ``--cfg-options model_wrapper_cfg.device_ids=None`` (mmengine merges
  repeated ``--cfg-options``) so DDP wraps the CPU module.

With CUDA nothing changes: mmengine's own launcher and NCCL are used.

Whichever launcher created it, :func:`end_process_group` destroys the process
group when the tool finishes, also on error. Left alive, gloo's threads meet
interpreter shutdown and a finished job can abort with ``terminate called
without an active exception`` (exit code -6), which torchrun reports as a
failed job.
"""
import argparse
import gc
import logging
import os
import runpy
import sys
from typing import Dict, List, Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.logging import print_log

from ..errors import ConfigError
from ..utils import load_config, mmseg_tool_path
from ..utils.arguments import (CfgOptions, checkpoint_file, config_file, fail,
                               input_errors)
from ..utils.registry import check_model_types, registry_error

#: The DDP wrapper of a CPU run (torch refuses ``device_ids`` for a CPU
#: module), as a config and as ``--cfg-options``.
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
    """Set up a ``--launcher pytorch`` run on CPU; see the module docstring.

    Args:
        argv (Sequence[str]): The tool's command line (``sys.argv``).
        cuda (bool, optional): Whether CUDA is usable; defaults to
            ``torch.cuda.is_available()``.

    Returns:
        list[str]: ``argv``, with the DDP options added when launching on CPU.
    """
    argv = list(argv)
    if cuda is None:
        cuda = torch.cuda.is_available()
    launcher = argv_launcher(argv)
    if cuda or launcher == 'none':
        return argv
    if launcher != 'pytorch':
        raise RuntimeError(
            f'--launcher {launcher} needs CUDA devices with mmengine 0.10; on '
            'a machine without GPUs use tools/dist_train.sh / dist_test.sh '
            '(--launcher pytorch, gloo backend).')
    init_cpu_group()
    return argv + ['--cfg-options', *CPU_WRAPPER_OPTIONS]


def init_cpu_group() -> None:
    """Join torchrun's process group on the CPU (gloo), once."""
    if 'RANK' not in os.environ:
        raise RuntimeError('--launcher pytorch expects the environment of '
                           'torchrun (RANK, WORLD_SIZE, MASTER_ADDR, '
                           'MASTER_PORT); use tools/dist_train.sh.')
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')


def start_launcher(launcher: str,
                   cuda: Optional[bool] = None) -> Dict[str, object]:
    """Join the process group of ``--launcher``, for a tool that builds its
    own runners (the robustness grid, collapse, the comparison report).

    ``none`` does nothing. With CUDA, mmengine's ``init_dist`` starts the
    group (NCCL); without, ``pytorch`` starts a gloo group as
    :func:`prepare_cpu_launch` does (``slurm`` needs CUDA).

    Args:
        launcher (str): ``'none'``, ``'pytorch'`` or ``'slurm'``.
        cuda (bool, optional): Whether CUDA is usable; defaults to
            ``torch.cuda.is_available()``.

    Returns:
        dict: Options to merge into every config the tool runs
        (``launcher`` and, on the CPU, the DDP wrapper's), empty for
        ``none``.
    """
    if launcher == 'none':
        return {}
    if cuda is None:
        cuda = torch.cuda.is_available()
    if cuda:
        from mmengine.dist import init_dist
        if not dist.is_initialized():
            init_dist(launcher)
        quiet_other_ranks(int(os.environ.get('RANK', '0')))
        return {'launcher': launcher}
    prepare_cpu_launch(['--launcher', launcher], cuda=False)
    quiet_other_ranks(int(os.environ.get('RANK', '0')))
    return {'launcher': launcher, 'model_wrapper_cfg': dict(CPU_WRAPPER)}


def quiet_other_ranks(rank: int) -> None:
    """Let only rank 0 print INFO and WARNING lines: mmengine does so for
    the loggers created after the process group, this for those created
    before it (at import, or by the tool)."""
    if rank == 0:
        return
    from mmengine.logging import MMLogger
    for logger in MMLogger._instance_dict.values():
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler:
                handler.setLevel(logging.ERROR)


def end_process_group() -> None:
    """Destroy the default process group, if any (see the module docstring).

    Safe to call when no group exists. Errors while destroying are logged
    (``print_log``, warning), not raised, so they never mask the job's own
    exit status or exception.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001  # the job's outcome wins
        print_log(
            f'mmseg_elliptical: destroying the process group failed: '
            f'{exc!r}',
            logger='current',
            level=logging.WARNING)
    # The group object outlives destroy_process_group while DDP's reducer
    # holds it, and the Runner that holds DDP sits in reference cycles: free
    # them now, so gloo joins its threads before interpreter shutdown.
    gc.collect()


def check_mmseg_tool_args(name: str, argv: Sequence[str]) -> None:
    """Check the command line of mmseg's ``tools/<name>`` before it runs:
    mmseg's own parser reads it (its errors exit with status 2, as ever),
    then the config must exist and, for ``test.py``, the checkpoint be a
    complete torch checkpoint, and every ``--cfg-options`` be
    ``KEY=VALUE``. A bad one ends the tool with one line and status 2."""
    args = list(argv[1:])
    if '--cfg-options' in args:
        values = []
        for arg in args[args.index('--cfg-options') + 1:]:
            if arg.startswith('--'):
                break
            values.append(arg)
        try:
            CfgOptions(['--cfg-options'], 'cfg_options')(None,
                                                         argparse.Namespace(),
                                                         values)
        except argparse.ArgumentError as e:
            fail(str(e))
    saved = sys.argv
    try:
        sys.argv = list(argv)
        parsed = runpy.run_path(
            mmseg_tool_path(name), run_name='mmseg_tool')['parse_args']()
    finally:
        sys.argv = saved
    checks = [('config', config_file)]
    if hasattr(parsed, 'checkpoint'):
        checks.append(('checkpoint', checkpoint_file))
    for dest, check in checks:
        try:
            check(getattr(parsed, dest))
        except argparse.ArgumentTypeError as e:
            fail(f'argument {dest}: {e}')
    try:
        check_model_types(
            load_config(parsed.config, getattr(parsed, 'cfg_options', None)))
    except ConfigError as e:
        fail(f'{parsed.config}: {e}')


def run_mmseg_tool(name: str) -> None:
    """Execute mmseg's ``tools/<name>`` as ``__main__`` (reads ``sys.argv``).

    Importing this package has registered the plugin's components and its
    weights-only checkpoint loader. The command line is checked first
    (:func:`check_mmseg_tool_args`), and the plugin's own errors while the
    tool runs (an unreadable checkpoint, a refused model argument) end it
    with one line and exit status 2 instead of a traceback.
    ``--launcher pytorch`` also works without CUDA (gloo; see
    :func:`prepare_cpu_launch`). The process group of a distributed run is
    destroyed when the script ends, also on error, so the exit status is the
    job's.
    """
    check_mmseg_tool_args(name, sys.argv)
    sys.argv = prepare_cpu_launch(sys.argv)
    try:
        runpy.run_path(mmseg_tool_path(name), run_name='__main__')
    except input_errors() as error:
        fail(str(error))
    except KeyError as error:
        config_error = registry_error(error)
        if config_error is None:
            raise
        fail(str(config_error))
    finally:
        end_process_group()
