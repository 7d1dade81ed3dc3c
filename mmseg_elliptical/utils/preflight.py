"""What a run needs around it, checked at the door (docs/reliability.md):
an output folder that is not a file, the config's data folders, the
environment of ``--launcher pytorch|slurm``, and a grid file that holds
each model's own results. Each problem is one
:class:`~mmseg_elliptical.errors.ConfigError` line naming the fix."""
import copy
import json
import os
import os.path as osp
import sys
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Sequence, Tuple

from ..errors import ConfigError
from .config import load_config

#: True inside :func:`launching`.
LAUNCHING = False
#: The tools of a source checkout.
TOOLS = osp.join(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'tools')
#: The loaders a tool that tests models reads.
TEST = ('test_dataloader', )


@contextmanager
def launching() -> Iterator[None]:
    """Check a command line that torchrun runs next (``tools/check_args.py``):
    :func:`check_launcher` takes a launcher whose environment is not there
    yet."""
    global LAUNCHING
    LAUNCHING, was = True, LAUNCHING
    try:
        yield
    finally:
        LAUNCHING = was


def check_work_dir(path: Optional[str]) -> None:
    """Refuse an output folder that is an existing file."""
    if path and osp.isfile(path):
        raise ConfigError(f'--work-dir {path} is a file, not a folder; give '
                          'a folder (it is created if missing)')


def _datasets(dataset: Dict) -> Iterator[Dict]:
    """A dataset config and those it wraps (Concat-, RepeatDataset, ...)."""
    yield dataset
    for inner in [dataset.get('dataset')] + list(
            dataset.get('datasets') or []):
        if isinstance(inner, dict):
            yield from _datasets(inner)


def missing_data(cfg,
                 loaders: Sequence[str] = TEST) -> Optional[Tuple[str, str]]:
    """The first data folder of ``loaders`` that does not exist: the
    loader's name and the folder (``data_root`` joined with
    ``data_prefix``'s paths, as mmengine's datasets join them). Datasets
    that generate their data (the demo's ``generate``) and remote paths are
    not checked.

    Returns:
        tuple[str, str], optional: ``(loader, folder)``, or None.
    """
    for loader in loaders:
        top = (cfg.get(loader) or {}).get('dataset')
        if not isinstance(top, dict):
            continue
        for ds in _datasets(top):
            if ds.get('generate'):
                continue
            root = ds.get('data_root') or ''
            folders = [root] if root else []
            folders += [
                osp.join(root, p)
                for p in (ds.get('data_prefix') or {}).values() if p
            ]
            for folder in folders:
                if '://' not in folder and not osp.isdir(folder):
                    return loader, folder
    return None


def check_data(cfg, config: str, loaders: Sequence[str] = TEST) -> None:
    """Refuse a config whose data folder is missing
    (:func:`missing_data`)."""
    found = missing_data(cfg, loaders)
    if found:
        loader, folder = found
        raise ConfigError(
            f'{config}: the {loader.split("_")[0]} data folder {folder} does '
            'not exist; put the dataset there or point --cfg-options '
            f'{loader}.dataset.data_root=DIR at it')


def launch_script(tool: Optional[str] = None) -> str:
    """How to start ``tool`` under torchrun: its own ``tools/dist_<name>.sh``
    where there is one, else ``tools/dist_launch.sh``.

    Args:
        tool (str, optional): The tool's file, or its path under ``tools/``
            (``train.py``, ``analysis_tools/collapse.py``). Defaults to the
            running script.
    """
    tool = tool or sys.argv[0]
    stem = osp.splitext(osp.basename(tool))[0]
    if osp.isfile(osp.join(TOOLS, f'dist_{stem}.sh')):
        return f'tools/dist_{stem}.sh'
    if osp.isabs(tool) and osp.abspath(tool).startswith(TOOLS + os.sep):
        tool = osp.relpath(tool, TOOLS)
    return f'tools/dist_launch.sh {tool} NPROC'


def check_launcher(launcher: str, tool: Optional[str] = None) -> None:
    """Refuse ``--launcher pytorch`` outside torchrun, naming the tool's
    launch script (:func:`launch_script`), and ``--launcher slurm`` outside
    a task started by srun."""
    if launcher == 'pytorch' and 'RANK' not in os.environ and \
            not LAUNCHING:
        raise ConfigError(
            '--launcher pytorch expects the environment torchrun sets (RANK, '
            'WORLD_SIZE, MASTER_ADDR, MASTER_PORT); start it with '
            f'{launch_script(tool)}, or drop --launcher')
    if launcher == 'slurm' and 'SLURM_PROCID' not in os.environ and \
            not LAUNCHING:
        raise ConfigError(
            '--launcher slurm expects the environment of a task started by '
            'srun (SLURM_PROCID, SLURM_NTASKS, SLURM_NODELIST); start it with '
            f'{launch_script(tool).replace("dist_", "slurm_")}, or drop '
            '--launcher')


def model_identity(config: str, checkpoint: str) -> Dict:
    """What a grid file keeps of a model: its config, and its checkpoint's
    path, size and modification time."""
    stat = os.stat(checkpoint)
    return dict(
        config=config,
        checkpoint=checkpoint,
        checkpoint_size=stat.st_size,
        checkpoint_mtime=int(stat.st_mtime))


def other_model(path: str, name: str, entry: Dict,
                identity: Dict) -> Optional[str]:
    """Why grid file ``path`` cannot take model ``name`` (its ``entry``
    there was another model than ``identity``), or None."""
    found = {k: entry.get(k) for k in identity}
    if found == identity:
        return None
    return (f'{path} holds results of model {name!r} from {found}, not '
            f'{identity}: pass --names to tell them apart, another '
            '--work-dir, or delete the file to start over.')


def check_store(path: str, specs: Sequence) -> None:
    """Refuse grid file ``path`` (when it exists) if it holds a model of
    one of ``specs``' names from another config or checkpoint: the grid
    would refuse it once started, on every process."""
    try:
        with open(path) as f:
            models = json.load(f).get('models') or {}
    except (OSError, ValueError, AttributeError):
        return  # none yet, or the grid's own error names it
    for spec in specs:
        if spec.name in models and osp.isfile(spec.checkpoint):
            why = other_model(path, spec.name, models[spec.name],
                              model_identity(spec.config, spec.checkpoint))
            if why:
                raise ConfigError(why)


def check_run(parser,
              args,
              specs: Sequence = (),
              tool: Optional[str] = None,
              store: Optional[str] = None) -> None:
    """A tool's last door: :func:`check_work_dir` (``args.work_dir``),
    :func:`check_data` of each model's config, :func:`check_launcher`
    (``args.launcher``) and :func:`check_store`; a problem is a
    command-line error (status 2).

    Args:
        parser (argparse.ArgumentParser): The tool's parser.
        args (argparse.Namespace): Its parsed arguments.
        specs (Sequence[ModelSpec]): The models, whose test data is read.
        tool (str, optional): The tool's file (its ``__file__``), for
            :func:`launch_script`.
        store (str, optional): The tool's grid file in ``args.work_dir``.
    """
    try:
        work_dir = getattr(args, 'work_dir', None)
        check_work_dir(work_dir)
        for spec in specs:
            options = copy.deepcopy(getattr(args, 'cfg_options', None))
            check_data(load_config(spec.config, options), spec.config)
        check_launcher(getattr(args, 'launcher', 'none'), tool)
        if store and work_dir:
            check_store(osp.join(work_dir, store), specs)
    except ConfigError as e:
        parser.error(str(e))
