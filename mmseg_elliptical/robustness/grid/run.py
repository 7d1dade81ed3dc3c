"""The robustness grid: every model on the clean and corrupted cells.

:func:`run_grid` evaluates the cells not yet in the store, one model at a
time, each through ``runner.test()`` with :class:`~.loop.CorruptionGridLoop`
(so ``--launcher pytorch|slurm`` splits every cell's images across
processes, as in ``tools/test.py``); rank 0 alone writes the store.
:mod:`.corruption_report` writes the tables and heatmaps.
"""
import numbers
import os.path as osp
import time
import warnings
from functools import partial
from typing import Dict, Optional, Sequence, Union

from mmengine.config import Config
from mmengine.dist import barrier, is_main_process
from mmengine.logging import print_log
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

from ...errors import GridInterrupted
from ...utils.config import ModelSpec, load_config
from .loop import Cell, CellHook, key_of
from .store import GridError, ResultStore

IOU_METRICS = ('IoUMetric', 'PerClassIoUMetric')


def open_store(path: str, settings: Dict,
               specs: Sequence[ModelSpec]) -> ResultStore:
    """A grid's store with its models declared, read by every process
    before the main process writes to it (a barrier)."""
    store = ResultStore(path, settings, write=is_main_process())
    for spec in specs:
        store.add_model(*spec)
    barrier()
    return store


def with_image_areas(cfg: Config, per_class: bool) -> bool:
    """Make an ``IoUMetric`` test evaluator the plugin's
    ``PerClassIoUMetric`` that keeps the per-image areas (the same means).

    Args:
        cfg (Config): The config, changed in place.
        per_class (bool): Whether the cells are to keep ``IoU.<class>``.

    Returns:
        bool: Whether to keep the evaluator's ``IoU.<class>`` values.
    """
    evaluator = cfg.get('test_evaluator')
    if not isinstance(evaluator, dict):
        return True
    kind = str(evaluator.get('type')).split('.')[-1]
    if kind not in IOU_METRICS:
        return True
    evaluator.update(type='PerClassIoUMetric', keep_image_areas=True)
    return per_class or kind == 'PerClassIoUMetric'


def grid_config(spec: ModelSpec,
                cells: Sequence,
                work_dir: str,
                seed: int = 0,
                max_images: Optional[int] = None,
                cfg_options: Optional[Dict] = None,
                launch_options: Optional[Dict] = None,
                quiet: bool = True,
                per_class: bool = False) -> tuple:
    """The config whose ``runner.test()`` runs ``cells`` of one model.

    Returns:
        tuple: The config and whether to keep ``IoU.<class>`` (see
        :func:`with_image_areas`).
    """
    cfg = load_config(spec.config, cfg_options)
    for key in ('test_dataloader', 'test_cfg', 'test_evaluator'):
        if not cfg.get(key):
            raise GridError(f'The config {spec.config} has no {key}: the '
                            'robustness grid runs the test loop it defines.')
    keep_class_iou = with_image_areas(cfg, per_class)
    cfg.test_cfg = dict(
        type='CorruptionGridLoop',
        cells=[
            c.to_dict() if hasattr(c, 'to_dict') else list(c) for c in cells
        ],
        seed=seed,
        max_images=max_images,
        test_loop=dict(cfg.test_cfg))
    # The plugin's end-of-run summary (the demo's) would draw its picture
    # after every cell; the grid writes its own report.
    cfg.custom_hooks = [
        h for h in cfg.get('custom_hooks') or []
        if str(h.get('type')).split('.')[-1] != 'SegSummaryHook'
    ]
    cfg.work_dir = osp.join(work_dir, spec.name)
    cfg.load_from = spec.checkpoint
    cfg.resume = False
    if quiet:
        cfg.log_level = 'WARNING'
    if launch_options:
        cfg.merge_from_dict(launch_options)
    return cfg, keep_class_iou


def record_cell(store: ResultStore,
                name: str,
                metric: str,
                keep_class_iou: bool,
                bar,
                key: str,
                metrics: Dict,
                areas,
                seconds: float,
                images: Optional[Sequence[str]] = None) -> None:
    """Put a finished cell (its scalar metrics) in the store, and the
    model's test images (:meth:`~.store.ResultStore.set_images`)."""
    values = {
        k: round(float(v), 4)
        for k, v in metrics.items() if isinstance(v, numbers.Real) and (
            keep_class_iou or not k.startswith('IoU.'))
    }
    if metric not in values:
        raise GridError(f'The evaluator reports {sorted(values)}, not the '
                        f'metric {metric!r} (--metric).')
    values.update(seconds=round(seconds, 3), finished=timestamp())
    store.set_images(name, images)
    store.put(name, key, values, areas)
    if bar is not None:
        bar.update()


def run_grid(specs: Sequence[ModelSpec],
             corruptions: Sequence[str],
             severities: Sequence[int],
             work_dir: str,
             metric: str = 'mIoU',
             seed: int = 0,
             max_images: Optional[int] = None,
             cfg_options: Optional[Dict] = None,
             quiet: bool = True,
             per_class: bool = False,
             launch_options: Optional[Dict] = None) -> ResultStore:
    """Evaluate every model on the clean and every corrupted cell, resuming.

    Finished cells are read from ``<work_dir>/robustness.json``; each new one
    is written there at once (by rank 0, with its per-image areas when the
    evaluator is mmseg's ``IoUMetric``).

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
        per_class (bool): Also keep the IoU of every class (``IoU.<class>``)
            when the config's evaluator is mmseg's ``IoUMetric``. Defaults to
            False.
        launch_options (dict, optional): What
            :func:`~mmseg_elliptical.engine.start_launcher` returned: the
            runners' launcher (the settings do not depend on it).

    Returns:
        ResultStore: The results of every cell.
    """
    cells = [(None, None)] + [(c, s) for c in corruptions for s in severities]
    return run_cells(specs, cells, osp.join(work_dir, 'robustness.json'),
                     work_dir, metric, seed, max_images, cfg_options, quiet,
                     per_class, launch_options)


def run_cells(specs: Sequence[ModelSpec],
              cells: Union[Sequence[Cell], Dict[str, Sequence[Cell]]],
              path: str,
              work_dir: str,
              metric: str = 'mIoU',
              seed: int = 0,
              max_images: Optional[int] = None,
              cfg_options: Optional[Dict] = None,
              quiet: bool = True,
              per_class: bool = False,
              launch_options: Optional[Dict] = None,
              batch_size: Optional[int] = None,
              settings: Optional[Dict] = None) -> ResultStore:
    """Evaluate every model on ``cells`` (corruptions or attacks) that the
    store at ``path`` does not hold yet; see :func:`run_grid`.

    Args:
        cells (Sequence | dict): See :class:`~.loop.CorruptionGridLoop`; a
            dict gives each model (by name) its own cells.
        path (str): The store's JSON file.
        batch_size (int, optional): The test dataloader's batch size (the
            per-image results do not depend on it).
        settings (dict, optional): More settings the cells depend on, kept
            in the store (a rerun under others is refused).

    Returns:
        ResultStore: The results of every cell.
    """
    settings = dict(
        metric=metric,
        seed=seed,
        max_images=max_images,
        cfg_options=cfg_options or {},
        **(settings or {}))
    if per_class:
        settings['per_class'] = True
    store = open_store(path, settings, specs)
    per_model = cells if isinstance(cells, dict) else {
        spec.name: cells
        for spec in specs
    }
    todo = {
        spec.name: [
            c for c in per_model[spec.name]
            if store.get(spec.name, key_of(c)) is None
        ]
        for spec in specs
    }
    pending = sum(len(t) for t in todo.values())
    total = sum(len(per_model[spec.name]) for spec in specs)
    print_log(
        f'{total} cells ({len(specs)} models), {total - pending} already '
        f'done, {pending} to compute.',
        logger='current')
    bar = ProgressBar(pending) if pending and is_main_process() else None
    try:
        for spec in specs:
            if not todo[spec.name]:
                continue
            cfg, keep_class_iou = grid_config(spec, todo[spec.name], work_dir,
                                              seed, max_images, cfg_options,
                                              launch_options, quiet, per_class)
            if batch_size is not None:
                cfg.test_dataloader.batch_size = batch_size
            with warnings.catch_warnings():
                if quiet:
                    warnings.simplefilter('ignore')
                runner = Runner.from_cfg(cfg)
                runner.register_hook(
                    CellHook(
                        partial(record_cell, store, spec.name, metric,
                                keep_class_iou, bar)))
                runner.test()
        if bar is not None:
            bar.file.write('\n')
    except KeyboardInterrupt:
        kept = sum(len(m['cells']) for m in store.data['models'].values())
        raise GridInterrupted(
            f'interrupted: {kept} finished cells are kept in {path}; the '
            'same command resumes from them') from None
    return store


def timestamp() -> str:
    """Local time, for cell records."""
    return time.strftime('%Y-%m-%d %H:%M:%S')
