"""Corruption robustness of one or more segmentors, side by side.

For every corruption and severity, the config's test pipeline gets an
``ImageCorruption`` right after image loading and mmengine's test loop
computes the metric. Each model is built once; each finished cell is saved
to ``<work-dir>/robustness.json`` at once, so a rerun resumes. Outputs (in
``--work-dir``): ``robustness.json``, ``robustness.md``, ``robustness.csv``
and ``robustness.png`` (heatmaps).

Example::

    python tools/robustness.py \\
        configs/demo/segmenter_elliptical-vit-t_mask_1xb8-600iter_demo-shapes-64x64.py \\
        work_dirs/elliptical/iter_600.pth \\
        configs/demo/segmenter_vit-t_mask_1xb8-600iter_demo-shapes-64x64.py \\
        work_dirs/dot/iter_600.pth \\
        --corruptions gaussian_noise fog --severities 1 5
"""
import argparse
import csv
import os
import os.path as osp
import sys
import time
from typing import Dict, List, Optional, Sequence

from mmengine.config import DictAction
from mmengine.utils import ProgressBar

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.analysis.cli import load_config, model_specs
from mmseg_elliptical.transforms import (COMMON_CORRUPTIONS, CORRUPTIONS,
                                         EXTRA_CORRUPTIONS, SEVERITIES)

GROUPS = {'all': CORRUPTIONS, 'common': COMMON_CORRUPTIONS,
          'extra': EXTRA_CORRUPTIONS}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='mIoU under image corruptions, models side by side.')
    parser.add_argument(
        'models', nargs='+', metavar='CONFIG CHECKPOINT',
        help='pairs of config file and checkpoint')
    parser.add_argument(
        '--names', nargs='+', help='model names (default: config file names)')
    parser.add_argument(
        '--corruptions', nargs='+', default=['all'],
        help=f'corruption names, or a group: {", ".join(GROUPS)} '
        '(default all 19)')
    parser.add_argument(
        '--severities', nargs='+', type=int, default=list(SEVERITIES),
        help='severities 1-5 (default all)')
    parser.add_argument(
        '--work-dir', default='work_dirs/robustness',
        help='where results (and the resumable JSON) go')
    parser.add_argument(
        '--max-images', type=int, help='evaluate only the first N images')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the corruptions')
    parser.add_argument('--metric', default='mIoU',
                        help='metric to report (default mIoU)')
    parser.add_argument('--verbose', action='store_true',
                        help='keep the runners\' INFO logs')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of every config, as in tools/test.py')
    return parser.parse_args(argv)


def resolve_corruptions(names: Sequence[str]) -> List[str]:
    """Expand groups and check names, keeping order without duplicates."""
    out: List[str] = []
    for name in names:
        for c in GROUPS.get(name, (name, )):
            if c not in CORRUPTIONS:
                raise SystemExit(f'Unknown corruption {c!r}; valid are '
                                 f'{", ".join(CORRUPTIONS)} or a group '
                                 f'({", ".join(GROUPS)}).')
            if c not in out:
                out.append(c)
    return out


def plot_heatmaps(summaries: Dict[str, Dict], corruptions: Sequence[str],
                  severities: Sequence[int], metric: str, path: str) -> None:
    """One heatmap (corruption x severity, plus the mean) per model."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np

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
    fig.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(fig)


def write_reports(store: rb.ResultStore, names: Sequence[str],
                  corruptions: Sequence[str], severities: Sequence[int],
                  metric: str, work_dir: str) -> str:
    """Write the markdown, CSV and heatmap; return the markdown."""
    summaries = {
        n: rb.summarise(store.data['models'][n]['cells'], corruptions,
                        severities, metric)
        for n in names
    }
    text = rb.markdown_tables(summaries, corruptions, severities, metric)
    with open(osp.join(work_dir, 'robustness.md'), 'w') as f:
        f.write(text)
    header, rows = rb.csv_rows(summaries, corruptions, severities, metric)
    with open(osp.join(work_dir, 'robustness.csv'), 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    plot_heatmaps(summaries, corruptions, severities, metric,
                  osp.join(work_dir, 'robustness.png'))
    return text


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Run the grid; return the JSON data of the results."""
    args = parse_args(argv)
    corruptions = resolve_corruptions(args.corruptions)
    bad = [s for s in args.severities if s not in SEVERITIES]
    if bad:
        raise SystemExit(f'Unknown severities {bad}; valid are 1-5.')
    severities = sorted(set(args.severities))
    try:
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    os.makedirs(args.work_dir, exist_ok=True)
    settings = dict(metric=args.metric, seed=args.seed,
                    max_images=args.max_images,
                    cfg_options=args.cfg_options or {})
    try:
        store = rb.ResultStore(
            osp.join(args.work_dir, 'robustness.json'), settings)
        for name, config, ckpt in specs:
            store.add_model(name, config, ckpt)
    except ValueError as e:
        raise SystemExit(str(e))

    cells = [None] + [(c, s) for c in corruptions for s in severities]
    todo = {
        name: [cell for cell in cells
               if store.get(name, rb.cell_key(*(cell or (None, None)))) is None]
        for name, _, _ in specs
    }
    total = len(cells) * len(specs)
    pending = sum(len(t) for t in todo.values())
    print(f'{total} cells ({len(specs)} models x {len(cells)}), '
          f'{total - pending} already done, {pending} to compute.')
    bar = ProgressBar(pending) if pending else None
    for name, config, ckpt in specs:
        if not todo[name]:
            continue
        cfg = load_config(config, args.cfg_options)
        evaluator = rb.CellEvaluator(
            cfg, ckpt, osp.join(args.work_dir, name), quiet=not args.verbose)
        for cell in todo[name]:
            corruption, severity = cell or (None, None)
            loader = rb.corrupted_loader_cfg(
                cfg.test_dataloader, corruption, severity, args.seed,
                args.max_images)
            start = time.time()
            metrics = evaluator.evaluate(loader)
            if args.metric not in metrics:
                raise SystemExit(f'The evaluator reports {sorted(metrics)}, '
                                 f'not --metric {args.metric}.')
            metrics.update(seconds=round(time.time() - start, 3),
                           finished=rb.timestamp())
            store.put(name, rb.cell_key(corruption, severity), metrics)
            bar.update()
        evaluator.close()
    if bar is not None:
        sys.stdout.write('\n')
    text = write_reports(store, [n for n, _, _ in specs], corruptions,
                         severities, args.metric, args.work_dir)
    print(text)
    print(f'Results in {args.work_dir}/robustness.{{json,md,csv,png}}')
    return store.data


if __name__ == '__main__':
    main()
