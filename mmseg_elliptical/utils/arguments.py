"""What the command-line tools share to refuse bad input at the door:
``type=`` callables, :class:`CfgOptions`, and :func:`tool_main`, which ends
on the plugin's input errors with one line and status 2 (docs/reliability.md).
No torch or mmseg here: the tools check before they import them.
"""
import argparse
import functools
import os
import os.path as osp
import re
import sys
from typing import Callable, Optional, Sequence

from mmengine.config import DictAction

from ..errors import (INPUT_ERRORS, CheckpointError, ExportError,
                      GridInterrupted)
from .choices import CLOCKS
from .config import (arms_of, check_arms, load_config, model_names,
                     model_specs, run_names)
from .files import check_checkpoint, check_onnx_file
from .unknown_types import unknown_types_as_config_errors


def fail(message: str) -> None:
    """End the tool as argparse ends a bad command line: ``PROG: error:
    MESSAGE`` on stderr, exit status 2."""
    sys.stderr.write(f'{osp.basename(sys.argv[0])}: error: {message}\n')
    raise SystemExit(2)


def tool_main(main: Callable) -> Callable:
    """Decorate a tool's ``main(argv)``: the plugin's input errors and an
    unknown config ``type`` (:func:`~.unknown_types.registry_error`) end it
    with :func:`fail`; ``check_only`` (``tools/check_args.py``) is passed
    on."""

    @functools.wraps(main)
    def run(argv: Sequence[str] = None, check_only: bool = False):
        try:
            with unknown_types_as_config_errors():
                return main(argv, check_only=True) if check_only else \
                    main(argv)
        except INPUT_ERRORS as error:
            fail(str(error))
        except GridInterrupted as stop:
            sys.stderr.write(f'\n{osp.basename(sys.argv[0])}: {stop}\n')
            raise SystemExit(130)

    return run


def _number(kind: type, text: str, low, what: str):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value != value or value < low or \
            value == float('inf'):
        raise argparse.ArgumentTypeError(f'{text!r} is not {what}')
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _number(int, text, 1, 'a positive integer (1, 2, ...)')


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _number(int, text, 0, 'an integer >= 0')


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(float, text, 0, 'a finite number > 0')
    if value == 0:
        raise argparse.ArgumentTypeError(f'{text!r} is not a finite number '
                                         '> 0')
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    return _number(float, text, 0, 'a finite number >= 0')


def existing_file(text: str) -> str:
    """A path to an existing file."""
    if not osp.isfile(text):
        raise argparse.ArgumentTypeError(
            f'{text} does not exist'
            if not osp.exists(text) else f'{text} is a folder, not a file')
    return text


def config_file(text: str) -> str:
    """A config: an existing ``.py`` file, or one of mmseg's
    (``mmseg::family/name.py``)."""
    if text.startswith('mmseg::'):
        try:
            load_config(text)
        except FileNotFoundError as e:
            raise argparse.ArgumentTypeError(str(e))
        return text
    existing_file(text)
    if not text.endswith('.py'):
        raise argparse.ArgumentTypeError(f'{text} is not a config (.py) file')
    return text


def checkpoint_file(text: str) -> str:
    """An existing, complete torch checkpoint
    (:func:`~.files.check_checkpoint`)."""
    existing_file(text)
    try:
        return check_checkpoint(text)
    except CheckpointError as e:
        raise argparse.ArgumentTypeError(str(e))


def onnx_file(text: str) -> str:
    """An existing ONNX model with its weights beside it
    (:func:`~.files.check_onnx_file`)."""
    try:
        return check_onnx_file(text)
    except ExportError as e:
        raise argparse.ArgumentTypeError(str(e))


#: The devices :func:`device` takes (torch's spelling).
DEVICE = re.compile(r'(cpu|cuda)(:\d+)?')


def device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; whether that GPU is there is
    :func:`~.devices.check_device`'s, after the heavy imports."""
    if DEVICE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a device (cpu, cuda, cuda:0, ...)')
    return text


class CfgOptions(argparse.Action):
    """mmengine's ``DictAction`` that refuses an option without ``=`` as a
    command-line error naming it (mmengine's raises a ``ValueError`` from
    deep inside argparse)."""

    def __call__(self, parser, namespace, values, option_string=None):
        bad = [v for v in values if '=' not in v]
        if bad:
            raise argparse.ArgumentError(
                self, f'{bad[0]!r} is not KEY=VALUE (e.g. '
                'train_cfg.max_iters=100)')
        DictAction(self.option_strings, self.dest)(parser, namespace, values,
                                                   option_string)


def add_cfg_options(parser: argparse.ArgumentParser,
                    what: str = 'every config') -> None:
    """``--cfg-options KEY=VALUE ...``, as in mmseg's tools."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptions,
        metavar='KEY=VALUE',
        help=f'override settings of {what}, as in tools/test.py')


def add_work_dir(parser: argparse.ArgumentParser,
                 default: str,
                 old: Sequence[str] = ('--out-dir', )) -> None:
    """``--work-dir DIR``, mmseg's name of a tool's output folder (the
    ``old`` spellings stay as aliases)."""
    parser.add_argument(
        '--work-dir',
        *old,
        dest='work_dir',
        default=default,
        help=f'output folder (default {default})')


def add_timing(parser: argparse.ArgumentParser, rounds: int,
               what: str) -> None:
    """The options of the benchmark tools' interleaved timing:
    ``--batch-size``, ``--rounds`` (default ``rounds``), ``--min-run-time``
    (seconds per ``what`` and round), ``--threads``, ``--clock``,
    ``--device`` and ``--seed``."""
    add = parser.add_argument
    add('--batch-size', type=positive_int, default=1)
    add('--rounds',
        type=positive_int,
        default=rounds,
        help='interleaved timing rounds')
    add('--min-run-time',
        type=non_negative_float,
        default=0.,
        help=f'timed seconds per {what} and round (0: one step)')
    add('--threads',
        type=non_negative_int,
        default=1,
        help='torch threads (0: torch\'s default; 1 by default: on a shared '
        'CPU, threads waiting for each other make timings erratic)')
    add('--clock',
        choices=CLOCKS,
        default='wall',
        help='wall-clock, or process CPU time (CPU only)')
    add('--device', type=device, default='cpu')
    add('--seed', type=int, default=0)


def add_allow_partial(parser: argparse.ArgumentParser) -> None:
    """``--allow-partial``: load a checkpoint that does not fit the config's
    model (what fits; the report says so), instead of refusing it."""
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='load a checkpoint whose weights do not all fit the model '
        '(the rest stays random; the report says so) instead of refusing it')


def add_paired_test(parser: argparse.ArgumentParser) -> None:
    """``--resamples`` and ``--bootstrap-seed`` of the paired bootstrap."""
    parser.add_argument(
        '--resamples',
        type=positive_int,
        default=1000,
        help='resamples of the paired bootstrap (default 1000)')
    parser.add_argument(
        '--bootstrap-seed',
        type=int,
        default=0,
        help='seed of the paired bootstrap (default 0)')


def add_launcher(parser: argparse.ArgumentParser) -> None:
    """``--launcher none|pytorch|slurm`` and torch.distributed.launch's
    ``--local-rank``, as in mmseg's ``tools/test.py``."""
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm'],
        default='none',
        help='job launcher, as in tools/test.py')
    parser.add_argument(
        '--local_rank',
        '--local-rank',
        type=int,
        default=0,
        help=argparse.SUPPRESS)


def launcher_of(args: argparse.Namespace) -> str:
    """``args.launcher``, after giving ``--local-rank`` to the environment
    as mmseg's tools do (torchrun sets ``LOCAL_RANK`` itself)."""
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args.launcher


def add_models(parser: argparse.ArgumentParser,
               baseline: Optional[str] = None,
               help: str = 'pairs of config file and checkpoint') -> None:
    """The ``CONFIG CHECKPOINT [CONFIG CHECKPOINT ...]`` pairs and
    ``--names``; with ``baseline`` (what the baseline is for, for its help)
    also ``--baseline NAME`` (see :func:`models_of`)."""
    parser.add_argument(
        'models', nargs='+', metavar='CONFIG CHECKPOINT', help=help)
    parser.add_argument(
        '--names', nargs='+', help='model names (default: config file names)')
    if baseline:
        parser.add_argument(
            '--baseline', help=f'{baseline} (default: the last model)')


def models_of(parser: argparse.ArgumentParser,
              args: argparse.Namespace) -> list:
    """The models of :func:`add_models`' arguments (:func:`model_pairs`),
    one run each, and ``args.arms``: ``{arm: [run names]}``
    (:mod:`~.arms`: a name repeated in ``--names``, or a config given
    twice without them, is one arm of runs ``ARM#I``). Sets
    ``args.baseline``, where the parser has it, to the last arm unless
    given (None for one arm). A baseline that is no arm, a checkpoint
    given twice in an arm or runs of other datasets in one arm are
    command-line errors.

    Returns:
        list[ModelSpec]: One per run.
    """
    specs = model_pairs(parser, args.models)
    if args.names and len(args.names) != len(specs):
        parser.error(f'argument --names: --names gives {len(args.names)} '
                     f'names for {len(specs)} models.')
    given = list(args.names
                 or [osp.splitext(osp.basename(s.config))[0] for s in specs])
    try:
        runs = run_names(given)
        args.arms = arms_of(given, runs)
        check_arms(args.arms, {
            r: (s.config, s.checkpoint)
            for r, s in zip(runs, specs)
        })
    except ValueError as e:
        parser.error(f'argument --names: {e}')
    names = list(args.arms)
    if hasattr(args, 'baseline'):
        args.baseline = args.baseline or (names[-1]
                                          if len(names) > 1 else None)
        if args.baseline not in names + [None]:
            parser.error(f'argument --baseline: {args.baseline!r} is none of '
                         f'the models {names} (see --names).')
    return [s._replace(name=r) for s, r in zip(specs, runs)]


def model_pairs(parser: argparse.ArgumentParser,
                paths: Sequence[str],
                names: Sequence[str] = None) -> list:
    """The ``CONFIG CHECKPOINT ...`` arguments as model specs, each file
    checked (a config, a complete checkpoint); a bad one is a command-line
    error.

    Returns:
        list[ModelSpec]: One per model.
    """
    try:
        specs = model_specs(paths)
        for spec in specs:
            check_checkpoint(spec.checkpoint)
    except ValueError as e:  # pairing, missing files, checkpoints
        parser.error(f'argument CONFIG CHECKPOINT: {e}')
    try:
        names = model_names([s.config for s in specs], names)
    except ValueError as e:
        parser.error(f'argument --names: {e}')
    return [s._replace(name=n) for s, n in zip(specs, names)]
