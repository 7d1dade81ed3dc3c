"""Arms: the checkpoints of one model name, each a run (docs/evidence.md).

A name repeated in ``--names`` (or, without ``--names``, a config given
several times) makes one arm of that name; each of its runs is ``ARM#I``
(``I`` in command-line order) in the stores and per-run tables, and an arm
of one run keeps its plain name, so older command lines and stores read as
before. :func:`run_names` names the runs, :func:`check_arms` refuses arms
whose runs cannot be compared.
"""
import os.path as osp
from typing import Callable, Dict, List, Sequence

from .config import load_config


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
