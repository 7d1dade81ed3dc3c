"""Corruption-robustness grid: pipelines, a resumable store, the evaluator.

``tools/robustness.py`` is the command line; this module holds the parts:

* :func:`corrupted_loader_cfg` copies a config's test dataloader and inserts
  :class:`~mmseg_elliptical.transforms.ImageCorruption` right after the
  image loading transform of whatever dataset it uses;
* :class:`ResultStore` persists every finished cell to JSON at once, so an
  interrupted grid resumes where it stopped;
* :class:`CellEvaluator` builds a model's mmengine ``Runner`` once and runs
  mmengine's test loop per cell on a fresh dataloader.
"""
import copy
import json
import numbers
import os
import os.path as osp
import time
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mmengine.config import Config, ConfigDict

from ..transforms.image_corruption import check_corruption

CLEAN = 'clean'
LOADERS = ('LoadImageFromFile', 'LoadImageFromNDArray')


def cell_key(corruption: Optional[str], severity: Optional[int]) -> str:
    """JSON key of a grid cell: ``'clean'`` or ``'<corruption>/<severity>'``."""
    return CLEAN if corruption is None else f'{corruption}/{severity}'


def dataset_pipelines(dataset: Dict) -> List[List]:
    """The pipeline lists of a dataset config, looking inside wrappers.

    Args:
        dataset (dict): A dataset config; wrappers (``RepeatDataset``,
            ``ConcatDataset``, ...) are searched through ``dataset`` /
            ``datasets``.

    Returns:
        list[list]: The pipelines, the config's own objects (not copies).
    """
    if 'pipeline' in dataset:
        return [dataset['pipeline']]
    inner = [dataset['dataset']] if 'dataset' in dataset else list(
        dataset.get('datasets') or [])
    if not inner:
        raise ValueError(
            f'Cannot find the pipeline of dataset {dataset.get("type")!r}: '
            'the robustness tool needs a dataset config with `pipeline` '
            '(or a wrapper with `dataset` / `datasets`).')
    return [p for d in inner for p in dataset_pipelines(d)]


def insert_after_loading(pipeline: List, transform: Dict) -> List:
    """A copy of ``pipeline`` with ``transform`` right after image loading.

    Args:
        pipeline (list[dict]): Transform configs.
        transform (dict): Config of the transform to insert.

    Returns:
        list[dict]: The new pipeline.
    """
    types = [str(t.get('type', '')) for t in pipeline]
    for i, name in enumerate(types):
        if name.split('.')[-1] in LOADERS:
            return list(pipeline[:i + 1]) + [transform] + list(pipeline[i + 1:])
    raise ValueError(
        f'No image loading transform ({", ".join(LOADERS)}) in the test '
        f'pipeline {types}: the corruption must follow it. Add '
        'LoadImageFromFile to the pipeline.')


def corrupted_loader_cfg(loader_cfg: Dict,
                         corruption: Optional[str] = None,
                         severity: Optional[int] = None,
                         seed: int = 0,
                         max_images: Optional[int] = None) -> ConfigDict:
    """A test dataloader config whose images are corrupted.

    Args:
        loader_cfg (dict): The config's ``test_dataloader`` (not modified).
        corruption (str, optional): Corruption name; None for clean images.
        severity (int, optional): Severity 1-5.
        seed (int): Seed of :class:`ImageCorruption`.
        max_images (int, optional): Evaluate only the first images.

    Returns:
        ConfigDict: The new dataloader config.
    """
    cfg = ConfigDict(copy.deepcopy(loader_cfg))
    if corruption is not None:
        check_corruption(corruption, severity)
        transform = dict(type='ImageCorruption', corruption=corruption,
                         severity=severity, seed=seed)
        for pipeline in dataset_pipelines(cfg['dataset']):
            pipeline[:] = insert_after_loading(pipeline, transform)
    if max_images is not None:
        if max_images < 1:
            raise ValueError(f'max_images={max_images} must be >= 1.')
        cfg['dataset']['indices'] = max_images
    return cfg


class ResultStore:
    """Grid results in one JSON file, written after every finished cell.

    Layout::

        {"settings": {...},
         "models": {"<name>": {"config": ..., "checkpoint": ...,
                               "cells": {"clean": {"mIoU": ...}, ...}}}}

    Args:
        path (str): JSON file; read when it exists.
        settings (dict): What the numbers depend on (metric, seed, split,
            number of images). A file written under other settings is
            refused, so stale numbers never mix with new ones.
    """

    def __init__(self, path: str, settings: Dict) -> None:
        self.path = path
        settings = json.loads(json.dumps(settings))  # as the file holds it
        self.data: Dict = dict(settings=settings, models={})
        if osp.exists(path):
            with open(path) as f:
                found = json.load(f)
            if found.get('settings') != settings:
                raise ValueError(
                    f'{path} holds results computed with settings '
                    f'{found.get("settings")}, not {settings}: pass another '
                    '--work-dir, or delete the file to start over.')
            self.data = found

    def add_model(self, name: str, config: str, checkpoint: str) -> None:
        """Declare a model; a known name must keep its config and checkpoint.

        The checkpoint is identified by path, size and modification time, so
        results of an overwritten checkpoint are never reused.

        Args:
            name (str): Model name (table column).
            config (str): Config path.
            checkpoint (str): Checkpoint path.
        """
        stat = os.stat(checkpoint)
        ident = dict(config=config, checkpoint=checkpoint,
                     checkpoint_size=stat.st_size,
                     checkpoint_mtime=int(stat.st_mtime))
        entry = self.data['models'].setdefault(name, dict(ident, cells={}))
        found = {k: entry.get(k) for k in ident}
        if found != ident:
            raise ValueError(
                f'{self.path} holds results of model {name!r} from '
                f'{found}, not {ident}: pass --names to tell them apart, '
                'another --work-dir, or delete the file to start over.')

    def get(self, name: str, key: str) -> Optional[Dict]:
        """Metrics of a finished cell, or None."""
        return self.data['models'][name]['cells'].get(key)

    def put(self, name: str, key: str, metrics: Dict) -> None:
        """Record a finished cell and rewrite the file atomically."""
        self.data['models'][name]['cells'][key] = metrics
        os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
        tmp = f'{self.path}.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)


class CellEvaluator:
    """One model, built once, evaluated on any dataloader by its test loop.

    Does what ``Runner.test()`` does, with the run-level part (``before_run``
    hooks, loading the checkpoint; ``after_run`` in :meth:`close`) done once
    and a fresh test loop of the config's type per :meth:`evaluate`, so the
    model is never rebuilt or reloaded.

    Args:
        cfg (Config): The model's config (with any ``--cfg-options`` merged).
        checkpoint (str): Checkpoint to load.
        work_dir (str): Runner work dir (logs).
        quiet (bool): Log warnings only and hide build-time warnings.
            Defaults to True.
    """

    def __init__(self, cfg: Config, checkpoint: str, work_dir: str,
                 quiet: bool = True) -> None:
        from mmengine.runner import Runner
        for key in ('test_dataloader', 'test_cfg', 'test_evaluator'):
            if not cfg.get(key):
                raise ValueError(f'The config has no {key}: the robustness '
                                 'tool runs the test loop it defines.')
        cfg = copy.deepcopy(cfg)
        cfg.work_dir = work_dir
        cfg.load_from = checkpoint
        cfg.resume = False
        if quiet:
            cfg.log_level = 'WARNING'
        self.cfg = cfg
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter('ignore')
            self.runner = Runner.from_cfg(cfg)
            self.runner.call_hook('before_run')
            self.runner.load_or_resume()

    def evaluate(self, loader_cfg: Dict) -> Dict[str, float]:
        """Run the config's test loop on ``loader_cfg`` and return metrics.

        Args:
            loader_cfg (dict): Test dataloader config.

        Returns:
            dict[str, float]: The evaluator's scalar metrics.
        """
        from mmengine.registry import LOOPS
        loop_cfg = copy.deepcopy(dict(self.cfg.test_cfg))
        loop_cfg.setdefault('type', 'TestLoop')
        loop = LOOPS.build(
            loop_cfg,
            default_args=dict(
                runner=self.runner,
                dataloader=loader_cfg,
                evaluator=copy.deepcopy(self.cfg.test_evaluator)))
        # Hooks and the log processor find the current loop on the runner.
        self.runner._test_loop = loop
        metrics = loop.run()
        return {k: round(float(v), 4) for k, v in metrics.items()
                if isinstance(v, numbers.Real)}

    def close(self) -> None:
        """Call the ``after_run`` hooks (closes the runner's log files)."""
        self.runner.call_hook('after_run')


def summarise(cells: Dict[str, Dict], corruptions: Sequence[str],
              severities: Sequence[int], metric: str) -> Dict:
    """Clean score, per-corruption means, the grid mean and relative drop.

    Args:
        cells (dict): ``{cell_key: metrics}`` of one model.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): Metric name, e.g. ``'mIoU'``.

    Returns:
        dict: ``clean``, ``grid`` (``{corruption: [score per severity]}``),
        ``per_corruption`` (mean over severities), ``mean`` (mean over the
        whole grid) and ``drop`` (``(clean - mean) / clean``); missing cells
        are None and leave the means None.
    """

    def score(key: str) -> Optional[float]:
        found = cells.get(key)
        return None if found is None else found.get(metric)

    def mean(values: Iterable[Optional[float]]) -> Optional[float]:
        values = list(values)
        if not values or any(v is None for v in values):
            return None
        return sum(values) / len(values)

    grid = {c: [score(cell_key(c, s)) for s in severities]
            for c in corruptions}
    per_corruption = {c: mean(grid[c]) for c in corruptions}
    clean = score(CLEAN)
    total = mean(per_corruption.values())
    drop = None if clean in (None, 0) or total is None else \
        (clean - total) / clean
    return dict(clean=clean, grid=grid, per_corruption=per_corruption,
                mean=total, drop=drop)


def _fmt(value: Optional[float], pct: bool = False) -> str:
    if value is None:
        return '-'
    return f'{100 * value:.1f}%' if pct else f'{value:.2f}'


def markdown_tables(summaries: Dict[str, Dict], corruptions: Sequence[str],
                    severities: Sequence[int], metric: str) -> str:
    """A summary table and a per-cell table, models side by side.

    Args:
        summaries (dict): ``{model: summarise(...)}``.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): Metric name.

    Returns:
        str: Markdown.
    """
    names = list(summaries)
    lines = [f'| model | clean {metric} | mean corrupted {metric} | '
             'relative drop |', '|---|---:|---:|---:|']
    for name, s in summaries.items():
        lines.append(f'| {name} | {_fmt(s["clean"])} | {_fmt(s["mean"])} | '
                     f'{_fmt(s["drop"], pct=True)} |')
    lines += ['', '| corruption | severity | ' + ' | '.join(names) + ' |',
              '|---|---|' + '---:|' * len(names)]
    for c in corruptions:
        for i, sev in enumerate(severities):
            row = [_fmt(summaries[n]['grid'][c][i]) for n in names]
            lines.append(f'| {c} | {sev} | ' + ' | '.join(row) + ' |')
        row = [_fmt(summaries[n]['per_corruption'][c]) for n in names]
        lines.append(f'| {c} | mean | ' + ' | '.join(row) + ' |')
    return '\n'.join(lines) + '\n'


def csv_rows(summaries: Dict[str, Dict], corruptions: Sequence[str], severities: Sequence[int],
             metric: str) -> Tuple[List[str], List[List]]:
    """Long-format rows: model, corruption, severity, score, relative drop.

    Returns:
        tuple[list[str], list[list]]: Header and rows (clean first).
    """
    header = ['model', 'corruption', 'severity', metric, 'relative_drop']
    rows = []
    for name, s in summaries.items():
        rows.append([name, CLEAN, 0, s['clean'], 0.0])
        for c in corruptions:
            for i, sev in enumerate(severities):
                v = s['grid'][c][i]
                drop = None if v is None or not s['clean'] else \
                    (s['clean'] - v) / s['clean']
                rows.append([name, c, sev, v, drop])
    return header, rows


def timestamp() -> str:
    """Local time, for cell records."""
    return time.strftime('%Y-%m-%d %H:%M:%S')
