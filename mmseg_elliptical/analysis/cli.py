"""Command-line helpers shared by the evidence tools."""
import os.path as osp
from typing import List, NamedTuple, Optional, Sequence

from mmengine.config import Config


class ModelSpec(NamedTuple):
    """A model given on the command line.

    Attributes:
        name (str): Label of the model in tables and figures.
        config (str): Absolute config path.
        checkpoint (str): Absolute checkpoint path.
    """
    name: str
    config: str
    checkpoint: str


def model_specs(paths: Sequence[str],
                names: Optional[Sequence[str]] = None) -> List[ModelSpec]:
    """Pair ``CONFIG CHECKPOINT ...`` arguments and name the models.

    Args:
        paths (Sequence[str]): Config and checkpoint paths, alternating.
        names (Sequence[str], optional): One name per model; defaults to the
            config file names (made unique by a ``#index`` suffix).

    Returns:
        list[ModelSpec]: One entry per model.

    Raises:
        ValueError: Odd number of paths, a missing file, or bad names.
    """
    if not paths or len(paths) % 2:
        raise ValueError('models must come as CONFIG CHECKPOINT pairs, got '
                         f'{len(paths)} paths.')
    pairs = list(zip(paths[::2], paths[1::2]))
    for config, ckpt in pairs:
        if not config.endswith('.py'):
            raise ValueError(f'{config} is not a config (.py) file: give '
                             'CONFIG CHECKPOINT pairs, config first.')
        for path, what in ((config, 'config'), (ckpt, 'checkpoint')):
            if not osp.isfile(path):
                raise ValueError(f'{what} {path} does not exist.')
    if names:
        if len(names) != len(pairs):
            raise ValueError(f'--names gives {len(names)} names for '
                             f'{len(pairs)} models.')
        names = list(names)
    else:
        names = [osp.splitext(osp.basename(c))[0] for c, _ in pairs]
        names = [n if names.count(n) == 1 else f'{n}#{i}'
                 for i, n in enumerate(names)]
    if len(set(names)) != len(names):
        raise ValueError(f'Model names must differ, got {names}.')
    return [ModelSpec(n, osp.abspath(c), osp.abspath(k))
            for n, (c, k) in zip(names, pairs)]


def load_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """Read a config and merge ``--cfg-options``."""
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def split_loader(cfg: Config, split: str) -> dict:
    """The ``<split>_dataloader`` config, with a clear error when absent.

    Args:
        cfg (Config): A full config.
        split (str): ``'train'``, ``'val'`` or ``'test'``.

    Returns:
        dict: The dataloader config.
    """
    loader = cfg.get(f'{split}_dataloader')
    if not loader:
        raise ValueError(f'The config has no {split}_dataloader; pick '
                         'another --split.')
    return loader
