"""The command line of mmseg's ``tools/train.py`` and ``test.py`` checked
before torch and mmseg are imported (the registries' check follows in
:func:`mmseg_elliptical.engine.launch.check_mmseg_tool_args`)."""
import argparse
import ast
import os
import runpy
import sys
from typing import Sequence, Tuple

from mmengine.config import Config

from ..errors import ConfigError
from .arguments import CfgOptions, checkpoint_file, config_file, fail
from .config import load_config, mmseg_tool_path
from .preflight import check_data, check_launcher, check_work_dir

#: The data folders each of mmseg's tools reads.
DATA_OF = {
    'train.py': ('train_dataloader', 'val_dataloader'),
    'test.py': ('test_dataloader', )
}


def mmseg_parse_args(name: str) -> argparse.Namespace:
    """``sys.argv`` parsed by the ``parse_args`` of mmseg's ``tools/<name>``
    without the script's imports (:class:`.arguments.CfgOptions` for
    ``DictAction``), or by the whole script where that needs more."""
    path = mmseg_tool_path(name)
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    found = [
        n for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == 'parse_args'
    ]
    scope = dict(argparse=argparse, os=os, osp=os.path, DictAction=CfgOptions)
    if found:
        exec(compile(ast.Module(found, []), path, 'exec'), scope)
        try:
            return scope['parse_args']()
        except NameError:
            pass
    return runpy.run_path(path, run_name='mmseg_tool')['parse_args']()


def config_error_line(config: str, error: ConfigError) -> str:
    """The one line of a config problem, naming the config."""
    text = str(error)
    return text if text.startswith(('--', config)) else f'{config}: {text}'


def check_mmseg_tool_command(
        name: str, argv: Sequence[str]) -> Tuple[argparse.Namespace, Config]:
    """Check the command line of mmseg's ``tools/<name>``: its parser, the
    config, checkpoint, folders and ``--launcher``; a bad one ends the tool
    with one line and status 2. Returns the parsed arguments and config."""
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
        parsed = mmseg_parse_args(name)
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
        check_work_dir(getattr(parsed, 'work_dir', None))
        cfg = load_config(parsed.config, getattr(parsed, 'cfg_options', None))
        check_data(cfg, parsed.config, DATA_OF.get(name, ()))
        check_launcher(getattr(parsed, 'launcher', 'none'), name)
    except ConfigError as e:
        fail(config_error_line(parsed.config, e))
    return parsed, cfg
