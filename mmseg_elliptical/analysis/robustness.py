"""Corruption-robustness grid: pipelines, a resumable store, the report.

``tools/robustness.py`` is the command line; this module does the work:

* :func:`corrupted_loader_cfg` copies a config's test dataloader and inserts
  :class:`~mmseg_elliptical.transforms.ImageCorruption` right after the
  image loading transform of whatever dataset it uses;
* :class:`ResultStore` persists every finished cell to JSON at once, so an
  interrupted grid resumes where it stopped;
* :class:`CellEvaluator` builds a model's mmengine ``Runner`` once and runs
  mmengine's test loop per cell on a fresh dataloader;
* :func:`run_grid` evaluates the missing cells of every model and
  :func:`write_robustness_report` writes the tables and heatmaps.
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

from ..transforms.image_corruption import (COMMON_CORRUPTIONS, CORRUPTIONS,
                                           EXTRA_CORRUPTIONS, check_corruption)
from ..utils.cli import ModelSpec, load_config
from ..utils.report import markdown_table, pyplot, write_report

CLEAN = 'clean'
LOADERS = ('LoadImageFromFile', 'LoadImageFromNDArray')


class GridError(ValueError):
    """A grid that cannot run as asked (names, settings, stored results)."""


GROUPS = {'all': CORRUPTIONS, 'common': COMMON_CORRUPTIONS,
          'extra': EXTRA_CORRUPTIONS}


def cell_key(corruption: Optional[str], severity: Optional[int]) -> str:
    """JSON key of a cell: ``'clean'`` or ``'<corruption>/<severity>'``."""
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
            return [*pipeline[:i + 1], transform, *pipeline[i + 1:]]
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
                raise GridError(
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
            raise GridError(
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
             quiet: bool = True) -> ResultStore:
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

    Returns:
        ResultStore: The results of every cell.
    """
    from mmengine.utils import ProgressBar
    settings = dict(metric=metric, seed=seed, max_images=max_images,
                    cfg_options=cfg_options or {})
    store = ResultStore(osp.join(work_dir, 'robustness.json'), settings)
    for spec in specs:
        store.add_model(*spec)
    cells = [(None, None)] + [(c, s) for c in corruptions for s in severities]
    todo = {spec.name: [c for c in cells
                        if store.get(spec.name, cell_key(*c)) is None]
            for spec in specs}
    pending = sum(len(t) for t in todo.values())
    total = len(cells) * len(specs)
    print(f'{total} cells ({len(specs)} models x {len(cells)}), '
          f'{total - pending} already done, {pending} to compute.')
    bar = ProgressBar(pending) if pending else None
    for spec in specs:
        if not todo[spec.name]:
            continue
        cfg = load_config(spec.config, cfg_options)
        evaluator = CellEvaluator(cfg, spec.checkpoint,
                                  osp.join(work_dir, spec.name), quiet=quiet)
        for corruption, severity in todo[spec.name]:
            loader = corrupted_loader_cfg(cfg.test_dataloader, corruption,
                                          severity, seed, max_images)
            start = time.time()
            metrics = evaluator.evaluate(loader)
            if metric not in metrics:
                raise GridError(f'The evaluator reports {sorted(metrics)}, '
                                f'not the metric {metric!r} (--metric).')
            metrics.update(seconds=round(time.time() - start, 3),
                           finished=timestamp())
            store.put(spec.name, cell_key(corruption, severity), metrics)
            bar.update()
        evaluator.close()
    if bar is not None:
        print()
    return store


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


def _pct(value: Optional[float]) -> Optional[str]:
    return None if value is None else f'{100 * value:.1f}%'


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
    summary = markdown_table(
        ['model', f'clean {metric}', f'mean corrupted {metric}',
         'relative drop'],
        [[n, s['clean'], s['mean'], _pct(s['drop'])]
         for n, s in summaries.items()], spec='.2f')
    rows = []
    for c in corruptions:
        for i, sev in enumerate(severities):
            rows.append([c, sev] + [summaries[n]['grid'][c][i] for n in names])
        rows.append([c, 'mean'] +
                    [summaries[n]['per_corruption'][c] for n in names])
    cells = markdown_table(['corruption', 'severity', *names], rows,
                           spec='.2f', left=2)
    return f'{summary}\n{cells}'


def csv_rows(summaries: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int],
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


def heatmaps(summaries: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int], metric: str):
    """One heatmap (corruption x severity, plus the mean) per model.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    import numpy as np
    plt = pyplot()
    grids = {}
    for name, s in summaries.items():
        grids[name] = np.array(
            [[np.nan if v is None else v for v in s['grid'][c]] +
             [np.nan if s['per_corruption'][c] is None else
              s['per_corruption'][c]] for c in corruptions], dtype=float)
    values = np.concatenate([g.ravel() for g in grids.values()])
    values = values[~np.isnan(values)]
    vmin, vmax = (values.min(), values.max()) if values.size else (0, 1)
    cols = [str(s) for s in severities] + ['mean']
    fig, axes = plt.subplots(
        1, len(grids), squeeze=False, sharey=True,
        figsize=(1.2 + 0.55 * len(cols) * len(grids) + 0.9 * len(grids),
                 1.0 + 0.32 * len(corruptions)))
    for ax, (name, grid) in zip(axes[0], grids.items()):
        im = ax.imshow(grid, cmap='viridis', vmin=vmin, vmax=vmax,
                       aspect='auto')
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(j, i, f'{v:.1f}', ha='center', va='center',
                        fontsize=7,
                        color='w' if v < (vmin + vmax) / 2 else 'k')
        clean = summaries[name]['clean']
        ax.set_title(f'{name}\nclean {metric} '
                     f'{"-" if clean is None else f"{clean:.1f}"}',
                     fontsize=8)
        ax.set_xticks(range(len(cols)), cols, fontsize=7)
        ax.set_xlabel('severity', fontsize=7)
    axes[0][0].set_yticks(range(len(corruptions)), corruptions, fontsize=7)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=metric)
    return fig


def write_robustness_report(store: ResultStore, names: Sequence[str],
                            corruptions: Sequence[str],
                            severities: Sequence[int], metric: str,
                            work_dir: str) -> str:
    """Write ``robustness.{md,csv,png}`` (the JSON is the store's).

    Returns:
        str: The markdown.
    """
    summaries = {
        n: summarise(store.data['models'][n]['cells'], corruptions,
                     severities, metric)
        for n in names
    }
    text = markdown_tables(summaries, corruptions, severities, metric)
    write_report(work_dir, 'robustness', markdown=text,
                 table=csv_rows(summaries, corruptions, severities, metric),
                 figure=heatmaps(summaries, corruptions, severities, metric))
    return text


def timestamp() -> str:
    """Local time, for cell records."""
    return time.strftime('%Y-%m-%d %H:%M:%S')
