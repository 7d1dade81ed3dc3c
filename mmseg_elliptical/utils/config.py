"""Configs and the models they describe: loading, naming, pairing (light:
mmengine's config reader, no torch; the tools check with it)."""
import importlib.util
import os.path as osp
from importlib.metadata import version
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from mmengine.config import Config
from mmengine.config.utils import (_get_cfg_metainfo,
                                   _get_external_cfg_base_path,
                                   _get_package_and_cfg_path)
from mmengine.utils import get_installed_path

from ..errors import ConfigError

#: mmengine's error for a top-level key that two bases set.
DUPLICATE_BASE_KEYS = 'Duplicate key is not allowed among bases'


class ModelSpec(NamedTuple):
    """A model given on the command line as ``CONFIG CHECKPOINT``.

    Attributes:
        name (str): Label of the model in tables and figures.
        config (str): Absolute config path.
        checkpoint (str): Absolute checkpoint path.
    """
    name: str
    config: str
    checkpoint: str


def model_names(configs: Sequence[str],
                names: Optional[Sequence[str]] = None) -> List[str]:
    """One distinct name per config: ``names`` or the config file names.

    Repeated file names get a ``#index`` suffix.

    Raises:
        ValueError: Wrong number of names, or names that repeat.
    """
    if names:
        if len(names) != len(configs):
            raise ValueError(f'--names gives {len(names)} names for '
                             f'{len(configs)} models.')
        names = list(names)
    else:
        names = [osp.splitext(osp.basename(c))[0] for c in configs]
        names = [
            n if names.count(n) == 1 else f'{n}#{i}'
            for i, n in enumerate(names)
        ]
    if len(set(names)) != len(names):
        raise ValueError(f'Model names must differ, got {names}.')
    return names


def model_specs(paths: Sequence[str],
                names: Optional[Sequence[str]] = None) -> List[ModelSpec]:
    """Pair ``CONFIG CHECKPOINT ...`` arguments and name the models.

    Args:
        paths (Sequence[str]): Config and checkpoint paths, alternating.
        names (Sequence[str], optional): One name per model.

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
    names = model_names([c for c, _ in pairs], names)
    return [
        ModelSpec(n, osp.abspath(c), osp.abspath(k))
        for n, (c, k) in zip(names, pairs)
    ]


def package_config(path: str) -> Config:
    """The config ``package::family/name.py`` as ``mmengine.hub.get_config``
    reads it (its metafile's entry, else the package's ``.mim/configs``),
    without its import of torch (``mmengine.runner``).

    Raises:
        FileNotFoundError: The package has no such config.
    """
    package, cfg_path = _get_package_and_cfg_path(path)
    package_path = get_installed_path(package)
    try:
        cfg_path = osp.join(
            package_path, '.mim',
            _get_cfg_metainfo(package_path, cfg_path)['Config'])
    except ValueError:  # no metafile entry: a base config
        cfg_path = _get_external_cfg_base_path(package_path, cfg_path)
    return Config.fromfile(cfg_path)


def load_config(path: str,
                cfg_options: Optional[dict] = None,
                no_pretrained: bool = False) -> Config:
    """Read a config and merge ``--cfg-options``.

    Args:
        path (str): Config file, or ``mmseg::...``.
        cfg_options (dict, optional): Overrides, as ``DictAction`` parses
            them.
        no_pretrained (bool): Drop ``model.pretrained`` and the parts'
            ``Pretrained`` ``init_cfg`` (random weights, no download).

    Raises:
        FileNotFoundError: The file does not exist.
        ConfigError: Two of its bases set the same key.
    """
    if '::' in path:  # mmseg/.mim/configs/...
        try:
            cfg = package_config(path)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f'config {path} does not exist: {e} (mmseg '
                f'{version("mmsegmentation")} ships its configs under '
                'mmseg/.mim/configs).') from None
    elif not osp.isfile(path):
        raise FileNotFoundError(f'config {path} does not exist.')
    else:
        try:
            cfg = Config.fromfile(path)
        except KeyError as e:
            if DUPLICATE_BASE_KEYS not in str(e):
                raise
            raise ConfigError(
                f'two of the bases of {path} set the same keys '
                f'({str(e).split("Duplicate keys: ")[-1].rstrip(chr(34))}), '
                'which mmengine does not merge: set each in one base only, '
                'or in the config itself after _base_ (e.g. the hooks of '
                'configs/_base_/adversarial_training.py come from its '
                'adversarial_training key, beside any custom_hooks).'
            ) from None
    if no_pretrained and 'model' in cfg:
        if cfg.model.get('pretrained'):
            cfg.model.pretrained = None
        for part in cfg.model.values():
            init_cfg = part.get('init_cfg') if isinstance(part, dict) else None
            if isinstance(init_cfg, dict) and \
                    init_cfg.get('type') == 'Pretrained':
                part.init_cfg = None
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def split_loader(cfg: Config, split: str) -> dict:
    """The ``<split>_dataloader`` config (a :class:`ConfigError` when
    absent)."""
    loader = cfg.get(f'{split}_dataloader')
    if not loader:
        raise ConfigError(f'The config has no {split}_dataloader; pick '
                          'another --split.')
    return loader


def mmseg_tool_path(name: str) -> str:
    """Path of a script mmseg's wheel ships under ``mmseg/.mim/tools``
    (``name`` e.g. ``'train.py'``).

    Raises:
        FileNotFoundError: mmseg's installation has no such script.
    """
    spec = importlib.util.find_spec('mmseg')  # found, not imported
    path = osp.join(osp.dirname(spec.origin), '.mim', 'tools', name)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'mmseg {version("mmsegmentation")} does not ship tools/{name} '
            f'at {path}; '
            'install mmsegmentation==1.2.2 from PyPI (its wheel carries the '
            'tools).')
    return path


# Arms (docs/evidence.md): a name repeated in --names makes one arm, whose
# runs are ARM#I (an arm of one run keeps its name).


def run_names(arms: Sequence[str]) -> List[str]:
    """One run name per model: its arm's name, or ``ARM#I`` when the arm
    has two or more runs.

    Raises:
        ValueError: Run names that collide (e.g. ``a#0`` given beside an
            arm ``a`` of two runs).
    """
    index: Dict[str, int] = {}
    names = []
    for arm in arms:
        i = index[arm] = index.get(arm, -1) + 1
        names.append(arm if arms.count(arm) == 1 else f'{arm}#{i}')
    if len(set(names)) != len(names):
        raise ValueError(f'the run names {names} repeat: rename the arms.')
    return names


def arms_of(arms: Sequence[str], runs: Sequence[str]) -> Dict[str, List]:
    """``{arm: [its runs]}`` in command-line order."""
    out: Dict[str, List] = {}
    for arm, run in zip(arms, runs):
        out.setdefault(arm, []).append(run)
    return out


def dataset_of(config: str) -> tuple:
    """What the runs of one arm must share: the test dataset's type and
    data root, and the decode head's class count."""
    cfg = load_config(config)
    data = (cfg.get('test_dataloader') or {}).get('dataset') or {}
    head = (cfg.get('model') or {}).get('decode_head') or {}
    if isinstance(head, (list, tuple)):
        head = head[-1] if head else {}
    return (data.get('type'), data.get('data_root'), head.get('num_classes'))


def check_arms(arms: Dict[str, List],
               specs: Dict[str, tuple],
               dataset: Callable = dataset_of) -> None:
    """Refuse an arm that gives one checkpoint twice, or whose runs'
    configs differ in dataset or class count.

    Args:
        arms (dict): ``{arm: [run names]}``.
        specs (dict): ``{run: (config, checkpoint)}``.
        dataset (callable): ``dataset(config)`` -> what must agree.

    Raises:
        ValueError: One line naming the arm, the runs and the fix.
    """
    for arm, runs in arms.items():
        if len(runs) < 2:
            continue
        seen: Dict[str, str] = {}
        for run in runs:
            ckpt = osp.realpath(specs[run][1])
            if ckpt in seen:
                raise ValueError(
                    f'arm {arm!r} gives checkpoint {specs[run][1]} twice '
                    f'({seen[ckpt]} and {run}): each run of an arm is '
                    'another training run; drop the copy.')
            seen[ckpt] = run
        found = {run: dataset(specs[run][0]) for run in runs}
        if len(set(found.values())) > 1:
            listed = ', '.join(f'{r}: dataset {d[0]} at {d[1]}, {d[2]} '
                               'classes' for r, d in found.items())
            raise ValueError(
                f'the runs of arm {arm!r} differ in dataset or class count '
                f'({listed}): the runs of an arm share dataset and '
                'classes; give other models other --names.')
