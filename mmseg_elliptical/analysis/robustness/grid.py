"""The robustness grid: every model on the clean and corrupted cells.

:func:`run_grid` evaluates the cells not yet in the store, one model at a
time, with a progress bar; :mod:`.report` writes the tables and heatmaps.
"""
import os.path as osp
import time
from typing import Dict, List, Optional, Sequence

from ...transforms.image_corruption import (COMMON_CORRUPTIONS, CORRUPTIONS,
                                            EXTRA_CORRUPTIONS)
from ...utils.config import ModelSpec, load_config
from .evaluator import CellEvaluator
from .pipeline import corrupted_loader_cfg
from .store import GridError, ResultStore, cell_key

GROUPS = {
    'all': CORRUPTIONS,
    'common': COMMON_CORRUPTIONS,
    'extra': EXTRA_CORRUPTIONS
}


def resolve_corruptions(names: Sequence[str]) -> List[str]:
    """Expand groups (``all``, ``common``, ``extra``) and check names.

    Args:
        names (Sequence[str]): Corruption names or group names.

    Returns:
        list[str]: The corruptions, in order, without duplicates.
    """
    out: List[str] = []
    for name in names:
        for c in GROUPS.get(name, (name, )):
            if c not in CORRUPTIONS:
                raise GridError(f'Unknown corruption {c!r}; valid are '
                                f'{", ".join(CORRUPTIONS)} or a group '
                                f'({", ".join(GROUPS)}).')
            if c not in out:
                out.append(c)
    return out


def run_grid(specs: Sequence[ModelSpec],
             corruptions: Sequence[str],
             severities: Sequence[int],
             work_dir: str,
             metric: str = 'mIoU',
             seed: int = 0,
             max_images: Optional[int] = None,
             cfg_options: Optional[Dict] = None,
             quiet: bool = True,
             per_class: bool = False) -> ResultStore:
    """Evaluate every model on the clean and every corrupted cell, resuming.

    Finished cells are read from ``<work_dir>/robustness.json``; each new one
    is written there at once.

    Args:
        specs (Sequence[ModelSpec]): The models.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        work_dir (str): Results and runner logs.
        metric (str): Metric every cell must report. Defaults to ``'mIoU'``.
        seed (int): Seed of the corruptions. Defaults to 0.
        max_images (int, optional): Evaluate only the first images.
        cfg_options (dict, optional): Overrides of every config.
        quiet (bool): Hide the runners' INFO logs. Defaults to True.
        per_class (bool): Also keep the IoU of every class (``IoU.<class>``):
            an ``IoUMetric`` test evaluator becomes the plugin's
            ``PerClassIoUMetric`` (the same means). Defaults to False.

    Returns:
        ResultStore: The results of every cell.
    """
    from mmengine.utils import ProgressBar
    settings = dict(
        metric=metric,
        seed=seed,
        max_images=max_images,
        cfg_options=cfg_options or {})
    if per_class:
        settings['per_class'] = True
    store = ResultStore(osp.join(work_dir, 'robustness.json'), settings)
    for spec in specs:
        store.add_model(*spec)
    cells = [(None, None)] + [(c, s) for c in corruptions for s in severities]
    todo = {
        spec.name:
        [c for c in cells if store.get(spec.name, cell_key(*c)) is None]
        for spec in specs
    }
    pending = sum(len(t) for t in todo.values())
    total = len(cells) * len(specs)
    print(f'{total} cells ({len(specs)} models x {len(cells)}), '
          f'{total - pending} already done, {pending} to compute.')
    bar = ProgressBar(pending) if pending else None
    for spec in specs:
        if not todo[spec.name]:
            continue
        cfg = load_config(spec.config, cfg_options)
        if per_class:
            with_per_class_iou(cfg)
        evaluator = CellEvaluator(
            cfg, spec.checkpoint, osp.join(work_dir, spec.name), quiet=quiet)
        for corruption, severity in todo[spec.name]:
            loader = corrupted_loader_cfg(cfg.test_dataloader, corruption,
                                          severity, seed, max_images)
            start = time.time()
            metrics = evaluator.evaluate(loader)
            if metric not in metrics:
                raise GridError(f'The evaluator reports {sorted(metrics)}, '
                                f'not the metric {metric!r} (--metric).')
            metrics.update(
                seconds=round(time.time() - start, 3), finished=timestamp())
            store.put(spec.name, cell_key(corruption, severity), metrics)
            bar.update()
        evaluator.close()
    if bar is not None:
        print()
    return store


def with_per_class_iou(cfg) -> None:
    """Make an ``IoUMetric`` test evaluator of ``cfg`` the plugin's
    ``PerClassIoUMetric`` (same arguments and means, plus ``IoU.<class>``)."""
    evaluator = cfg.get('test_evaluator')
    if isinstance(evaluator, dict) and \
            str(evaluator.get('type')).split('.')[-1] == 'IoUMetric':
        evaluator['type'] = 'PerClassIoUMetric'


def timestamp() -> str:
    """Local time, for cell records."""
    return time.strftime('%Y-%m-%d %H:%M:%S')
