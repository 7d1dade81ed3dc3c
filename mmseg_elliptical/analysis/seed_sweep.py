"""Train configs on several seeds and compare their validation metrics.

``tools/analysis_tools/compare_seeds.py`` (``make compare``) is its command
line.

Every (config, seed) run is mmseg's ``tools/train.py`` in a subprocess with
``--cfg-options randomness.seed=SEED``, in its own work dir
``WORK_DIR/NAME/seedSEED``. A finished run leaves ``result.json`` there and is
skipped when the command is run again, unless its settings (config path and
content, seed, options) changed, which is an error; an interrupted one is
resumed from its last checkpoint (``--resume``). The validation history is
read from the ``vis_data/scalars.json`` files that mmengine's
``LocalVisBackend`` writes.

Outputs in ``WORK_DIR``: ``compare.json`` (every run's history),
``compare.md`` (mean and standard deviation of the final metrics per model)
and ``compare.png`` (validation mIoU over iterations).
"""
import glob
import hashlib
import json
import math
import os
import os.path as osp
import subprocess
import sys
import time
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

from ..utils.config import parse_cfg_options
from ..utils.report import markdown_table, pyplot, write_report

TRAIN = ('from mmseg_elliptical.engine import run_mmseg_tool; '
         'run_mmseg_tool("train.py")')
RESULT = 'result.json'


def read_history(work_dir: str, metric: str = 'mIoU') -> Dict[int, Dict]:
    """Every validation logged under ``work_dir``, by iteration.

    Reads all ``*/vis_data/scalars.json`` (one per start of the run, so a
    resumed run has several), in time order: a later log of the same
    iteration replaces an earlier one.

    Args:
        work_dir (str): The run's work dir.
        metric (str): Key that marks a validation record.

    Returns:
        dict[int, dict]: ``{iteration: {metric name: value}}``.
    """
    history = {}
    for path in sorted(
            glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                if metric in record:
                    step = int(record.pop('step'))
                    history[step] = {
                        k: v
                        for k, v in record.items()
                        if k not in ('time', 'data_time')
                    }
    return history


def resolve(config: str, cfg_options: Sequence[str] = ()) -> Tuple[int, str]:
    """A config's ``train_cfg.max_iters`` and a fingerprint of its content.

    Args:
        config (str): Config file.
        cfg_options (Sequence[str]): ``key=value`` options merged into it.

    Returns:
        tuple[int, str]: ``max_iters`` and the start of the SHA-256 of the
        resolved config's text (bases and options included).
    """
    from mmengine.config import Config
    options = parse_cfg_options(cfg_options)
    with warnings.catch_warnings():  # the plugin's imports (pkg_resources)
        warnings.simplefilter('ignore')
        cfg = Config.fromfile(config)
    if options:
        cfg.merge_from_dict(options)
    digest = hashlib.sha256(cfg.pretty_text.encode()).hexdigest()[:16]
    return int(cfg.train_cfg.max_iters), digest


def train(config: str,
          seed: int,
          work_dir: str,
          cfg_options: Sequence[str] = ()) -> float:
    """Run mmseg's ``tools/train.py`` on one seed (resuming if it can).

    Args:
        config (str): Config file.
        seed (int): ``randomness.seed``.
        work_dir (str): The run's work dir; its ``train.log`` gets the
            output.
        cfg_options (Sequence[str]): More ``key=value`` options.

    Returns:
        float: Wall-clock seconds.
    """
    os.makedirs(work_dir, exist_ok=True)
    command = [
        sys.executable, '-c', TRAIN, config, '--work-dir', work_dir,
        '--resume', '--cfg-options', f'randomness.seed={seed}', *cfg_options
    ]
    out = osp.join(work_dir, 'train.log')
    start = time.perf_counter()
    with open(out, 'a') as f:
        proc = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode:
        with open(out) as f:
            tail = ''.join(f.readlines()[-20:])
        raise RuntimeError(f'Training {config} with seed {seed} failed '
                           f'(exit status {proc.returncode}); the end of '
                           f'{out}:\n{tail}')
    return time.perf_counter() - start


def run_all(configs: Sequence[str],
            names: Sequence[str],
            seeds: Sequence[int],
            work_dir: str,
            cfg_options: Sequence[str] = (),
            log=print) -> List[Dict]:
    """Train what has no ``result.json`` yet, one run at a time.

    Args:
        configs (Sequence[str]): Config files.
        names (Sequence[str]): One name per config (folder and label).
        seeds (Sequence[int]): Seeds of every config.
        work_dir (str): Root of the runs.
        cfg_options (Sequence[str]): ``key=value`` options of every run.
        log (callable): Progress printer.

    Returns:
        list[dict]: One result per run: ``name``, ``config``, ``seed``,
        ``cfg_options``, ``seconds`` (None when unknown), ``history``.
    """
    results = []
    resolved = {c: resolve(c, cfg_options) for c in configs}
    todo = [(c, n, s) for c, n in zip(configs, names) for s in seeds]
    for i, (config, name, seed) in enumerate(todo, 1):
        run_dir = osp.join(work_dir, name, f'seed{seed}')
        path = osp.join(run_dir, RESULT)
        last_iter, fingerprint = resolved[config]
        settings = dict(
            name=name,
            config=osp.abspath(config),
            seed=seed,
            cfg_options=list(cfg_options),
            config_sha256=fingerprint)
        if osp.isfile(path):
            with open(path) as f:
                result = json.load(f)
            found = {k: result.get(k) for k in settings}
            if found != settings:
                raise ValueError(
                    f'{path} holds a run with {found}, not {settings}: use '
                    'another --work-dir, or delete that folder to rerun it.')
            log(f'[{i}/{len(todo)}] {name} seed {seed}: done before, '
                f'kept ({path})')
        else:
            log(f'[{i}/{len(todo)}] {name} seed {seed}: training '
                f'(log: {osp.join(run_dir, "train.log")})')
            seconds = train(config, seed, run_dir, cfg_options)
            history = read_history(run_dir)
            if max(history, default=None) != last_iter:
                raise RuntimeError(
                    f'{run_dir} holds no validation at the last iteration '
                    f'({last_iter}; validated: {sorted(history)}): does the '
                    'config validate (val_cfg, val_evaluator) and log with '
                    "mmengine's LocalVisBackend? If the run was stopped "
                    'during its last validation, delete the folder.')
            result = dict(
                settings,
                seconds=round(seconds, 1),
                history={
                    str(k): v
                    for k, v in sorted(history.items())
                })
            with open(path, 'w') as f:
                json.dump(result, f, indent=1)
            last = result['history'][str(max(history))]
            log(f'    {seconds / 60:.1f} min, final mIoU '
                f'{last.get("mIoU", float("nan")):.2f}')
        results.append(result)
    return results


def mean_std(values: Sequence[float]) -> Dict[str, float]:
    """Mean and sample standard deviation (n - 1; NaN for one value)."""
    n = len(values)
    mean = sum(values) / n
    var = (
        sum((v - mean)**2
            for v in values) / (n - 1) if n > 1 else float('nan'))
    return dict(mean=mean, std=math.sqrt(var), n=n)


def summarise(results: Sequence[Dict],
              metrics: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Mean and standard deviation over seeds of each final metric.

    Args:
        results (Sequence[dict]): Runs as :func:`run_all` returns them.
        metrics (Sequence[str], optional): Metrics to summarise; default
            ``mIoU`` and every ``IoU.<class>``, in the order of the first
            run's log.

    Returns:
        dict: ``{name: {metric: {'mean', 'std', 'n'}}}`` in run order.
    """
    finals: Dict[str, List[Dict]] = {}
    for result in results:
        history = result['history']
        last = history[max(history, key=int)]
        finals.setdefault(result['name'], []).append(last)
    if metrics is None:
        first = next(iter(finals.values()))[0]
        metrics = ['mIoU'] + [k for k in first if k.startswith('IoU.')]
    return {
        name: {
            m: mean_std([float(r[m]) for r in runs])
            for m in metrics if all(m in r for r in runs)
        }
        for name, runs in finals.items()
    }


def markdown(summary: Dict[str, Dict], results: Sequence[Dict]) -> str:
    """The summary as a markdown table, one row per model.

    Cells are ``mean ± std`` over the seeds; the last column is the mean
    wall-clock time of a run.
    """
    metrics = list(next(iter(summary.values())))
    head = (['model', 'seeds'] + [m.replace('IoU.', '')
                                  for m in metrics] + ['min/run'])
    rows = []
    for name, stats in summary.items():
        seconds = [
            r['seconds'] for r in results
            if r['name'] == name and r.get('seconds')
        ]
        minutes = f'{sum(seconds) / len(seconds) / 60:.1f}' if seconds else '-'
        cells = [f'{s["mean"]:.2f} ± {s["std"]:.2f}' for s in stats.values()]
        n = next(iter(stats.values()))['n']
        rows.append([name, n] + cells + [minutes])
    return markdown_table(head, rows)


def figure(results: Sequence[Dict], metric: str = 'mIoU'):
    """Validation ``metric`` over iterations: every seed, and the mean.

    Args:
        results (Sequence[dict]): Runs as :func:`run_all` returns them.
        metric (str): Metric to plot.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    names = list(dict.fromkeys(r['name'] for r in results))
    for colour, name in zip(plt.rcParams['axes.prop_cycle'].by_key()['color'],
                            names):
        runs = [r['history'] for r in results if r['name'] == name]
        for history in runs:
            steps = sorted(history, key=int)
            ax.plot([int(s) for s in steps],
                    [history[s][metric] for s in steps],
                    color=colour,
                    alpha=0.35,
                    linewidth=1)
        common = sorted(set.intersection(*(set(h) for h in runs)), key=int)
        means = [
            mean_std([h[s][metric] for h in runs])['mean'] for s in common
        ]
        ax.plot([int(s) for s in common],
                means,
                color=colour,
                linewidth=2,
                marker='o',
                label=f'{name} (mean of {len(runs)})')
    ax.set_xlabel('iteration')
    ax.set_ylabel(f'validation {metric}')
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def compare_seeds(configs: Sequence[str],
                  names: Sequence[str],
                  seeds: Sequence[int],
                  work_dir: str,
                  cfg_options: Sequence[str] = (),
                  log=print) -> Tuple[Dict, List[Dict], str, List[str]]:
    """Train what is missing, then write ``compare.{json,md,png}``.

    Args:
        configs (Sequence[str]): Config files.
        names (Sequence[str]): One distinct name per config.
        seeds (Sequence[int]): Distinct seeds of every config.
        work_dir (str): Root of the runs and of the outputs.
        cfg_options (Sequence[str]): ``key=value`` options of every run.
        log (callable): Progress printer.

    Returns:
        tuple: The summary (:func:`summarise`), the runs (:func:`run_all`),
        the markdown table and the files written.
    """
    if len(names) != len(configs):
        raise ValueError(f'{len(names)} names for {len(configs)} configs: '
                         'give one per config.')
    if len(set(names)) != len(names):
        raise ValueError(f'names {list(names)} repeat a name: give each '
                         'config its own.')
    if len(set(seeds)) != len(seeds):
        raise ValueError(f'seeds {list(seeds)} repeat a seed.')
    for config in configs:
        if not osp.isfile(config):
            raise ValueError(f'config {config} does not exist.')
    results = run_all(configs, names, seeds, work_dir, cfg_options, log=log)
    summary = summarise(results)
    table = markdown(summary, results)
    written = write_report(
        work_dir,
        'compare',
        data=dict(summary=summary, runs=results),
        markdown=table,
        figure=figure(results))
    return summary, results, table, written
