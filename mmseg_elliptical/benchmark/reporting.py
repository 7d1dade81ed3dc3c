"""The benchmark's report rendered: markdown tables, CSV rows and a figure."""
from typing import Dict, List, Optional, Sequence, Tuple

from ..utils.output import markdown_table, pyplot
from .apgd_step import APGD_MODE
from .variants import ATTACK_MODES

MODE_NAMES = {
    'infer': 'inference',
    'train': 'training step',
    'attack': 'attack step',
    'attack-adaptive': 'adaptive attack step',
    APGD_MODE: 'APGD-MCE iteration'
}
RESULT_COLUMNS = ('model', 'family', 'role', 'size', 'mode', 'batch_size',
                  'median_ms', 'iqr_ms', 'images_per_s', 'peak_mem_mb',
                  'memory_measure', 'saved_mb')


def time_iqr(r: Dict) -> str:
    """A ratio row's interquartile range of the time ratio, ``q1-q3``."""
    return f"{r['time_q1']:.3f}-{r['time_q3']:.3f}"


def summary_tables(report: Dict) -> str:
    """Markdown: one short table per config, elliptical / each baseline
    (with the tool's verdicts when the rows carry them)."""
    judged = any('time_target' in r for r in report['ratios'])

    def verdict(r: Dict, quantity: str) -> Optional[str]:
        target = r.get(f'{quantity}_target')
        return target and f"{target}: {r[f'{quantity}_verdict']}"

    header = [
        'baseline', 'size', 'step', 'time', 'time IQR', 'peak memory',
        'saved tensors'
    ] + (['time target', 'memory target'] if judged else [])
    out = []
    families = list(dict.fromkeys(r['family'] for r in report['ratios']))
    for family in families:
        rows = [[
            r['role'], r['size'], MODE_NAMES[r['mode']], r['time'],
            time_iqr(r), r['memory'], r['saved']
        ] + ([verdict(r, 'time'), verdict(r, 'memory')] if judged else [])
                for r in report['ratios'] if r['family'] == family]
        out.append(f'**{family}**: elliptical / baseline (< 1: elliptical '
                   'is faster or smaller)\n\n' +
                   markdown_table(header, rows, left=3))
    return '\n'.join(out)


def runtime_table(report: Dict) -> str:
    """Markdown: onnxruntime / PyTorch eager per size (empty without an
    onnxruntime row)."""
    rows = [[
        r['model'], r['size'], r['pytorch_ms_per_image'],
        r['onnxruntime_ms_per_image'], r['time'],
        time_iqr(r)
    ] for r in report.get('runtime_ratios', [])]
    if not rows:
        return ''
    return ('**onnxruntime** / PyTorch eager, inference of the same model '
            '(< 1: onnxruntime is faster)\n\n' + markdown_table([
                'model', 'size', 'PyTorch ms/image', 'onnxruntime ms/image',
                'time', 'time IQR'
            ],
                                                                rows,
                                                                left=1))


def adaptive_table(report: Dict) -> str:
    """Markdown: adaptive / plain attack step per model and size (empty
    without attack rows)."""
    rows = [[r['model'], r['size'], r['time'],
             time_iqr(r), r['memory']]
            for r in report.get('adaptive_ratios', [])]
    if not rows:
        return ''
    return (
        '**adaptive attack step** / attack step of the same model (the '
        'extra cost of the gradient through m)\n\n' + markdown_table(
            ['model', 'size', 'time', 'time IQR', 'peak memory'], rows,
            left=1))


def apgd_table(report: Dict) -> str:
    """Markdown: an APGD-MCE iteration over PGD's attack step per model and
    size (empty without APGD rows)."""
    rows = [[
        r['model'], r['size'], r['iterations'], r['pgd_ms'], r['apgd_ms'],
        r['time'],
        time_iqr(r), r['memory']
    ] for r in report.get('apgd_ratios', [])]
    if not rows:
        return ''
    return ('**APGD-MCE iteration** / attack step (PGD\'s) of the same model '
            '(the extra work of APGD per iteration)\n\n' +
            markdown_table([
                'model', 'size', 'iterations', 'PGD step ms',
                'APGD ms per iteration', 'time', 'time IQR', 'peak memory'
            ],
                           rows,
                           spec=['', '', '', '.1f', '.1f', '.3f', '', '.3f'],
                           left=1))


def training_table(report: Dict) -> str:
    """Markdown: an adversarial training step / a plain one per model, size
    and recipe (empty without such rows)."""
    rows = [[
        r['model'], r['size'], r['recipe'], r['plain_ms'], r['at_ms'],
        r['time'],
        time_iqr(r)
    ] for r in report.get('adversarial_training', [])]
    if not rows:
        return ''
    return ('**adversarial training step** (the hook\'s attack, then the '
            'step) / plain training step of the same model\n\n' +
            markdown_table([
                'model', 'size', 'recipe', 'plain step ms', 'AT step ms',
                'time', 'time IQR'
            ],
                           rows,
                           spec=['', '', '', '.1f', '.1f', '.3f', ''],
                           left=3))


def overview_table(reports: Sequence[Dict]) -> str:
    """Markdown: one row per (run, config, size, baseline) with the time
    and peak memory ratios of inference, the training step and (when a run
    has them) the attack steps; then adaptive / plain attack step per run
    and model.

    Args:
        reports (Sequence[dict]): Each run's ``benchmark.json``.
    """

    def time(r: Optional[Dict]) -> str:
        if r is None:
            return '-'
        return f"{r['time']:.3f} ({time_iqr(r)})"

    modes = ['infer', 'train'] + [
        m for m in ATTACK_MODES + (APGD_MODE, ) if any(r['mode'] == m
                                                       for rep in reports
                                                       for r in rep['ratios'])
    ]
    rows, adaptive = [], []
    for report in reports:
        opts = report['meta']['options']
        run = f"batch {opts['batch_size']}" + (', compiled'
                                               if opts['compile'] else '')
        ratios = {
            (r['family'], r['size'], r['baseline'], r['mode']): r
            for r in report['ratios']
        }
        for family, size, baseline in dict.fromkeys(k[:3] for k in ratios):
            found = [ratios.get((family, size, baseline, m)) for m in modes]
            rows.append([f'{family} at {size}, {run}', baseline] +
                        [time(r) for r in found] +
                        [None if r is None else r['memory'] for r in found])
        adaptive += [[
            f"{r['family']} at {r['size']}, {run}", r['model'],
            time(r), r['memory']
        ] for r in report.get('adaptive_ratios', [])]
    table = markdown_table(
        ['backbone', 'elliptical /'] +
        [f'time {MODE_NAMES[m]}'
         for m in modes] + [f'peak memory {MODE_NAMES[m]}' for m in modes],
        rows,
        left=2)
    if not adaptive:
        return table
    return table + '\n\nAdaptive attack step / attack step (the extra ' \
        'cost of the gradient through m):\n\n' + markdown_table(
            ['backbone', 'model', 'time', 'peak memory'], adaptive, left=2)


def markdown(report: Dict) -> str:
    """The whole report: settings, summaries, models, every result."""
    meta, opts = report['meta'], report['meta']['options']
    measures = sorted({
        r['memory_measure']
        for r in report['results'] if r['memory_measure']
    })
    mode = opts.get('compile_mode', 'default')
    run = (f"torch.compile ({opts['compile']}"
           f"{'' if mode == 'default' else ', ' + mode})"
           if opts['compile'] else 'eager')
    if opts['amp']:
        run += ', bf16 autocast'
    lines = [f"```\n{meta['command']}\n```\n"] if meta.get('command') \
        else []
    lines += [
        f"{meta['target']} of each model, "
        f"{meta['device_name']}, {meta['threads']} thread(s), batch "
        f"{opts['batch_size']}, {run}, "
        f"{opts['rounds']} interleaved rounds ({opts['clock']} clock, "
        f"min_run_time {opts['min_run_time']:g} s) after {opts['warmup']} "
        f"warm-up step(s); peak memory: {', '.join(measures) or 'none'} "
        f"({opts['memory']}); torch {meta['torch']}.", ''
    ]
    if report['ratios']:
        lines += [summary_tables(report), '']
    if report.get('runtime_ratios'):
        lines += [runtime_table(report), '']
    if report.get('adaptive_ratios'):
        lines += [adaptive_table(report), '']
    if report.get('apgd_ratios'):
        lines += [apgd_table(report), '']
    if report.get('adversarial_training'):
        lines += [training_table(report), '']
    flops_sizes = sorted(
        {int(s)
         for m in report['models']
         for s in m['flops']})
    lines.append(
        markdown_table(
            ['model', 'role', 'params (M)'] +
            [f'GFLOPs@{s}' for s in flops_sizes],
            [[m['name'], m['role'], m['params'] / 1e6] +
             [m['flops'].get(str(s), 0) / 1e9 for s in flops_sizes]
             for m in report['models']],
            spec='.2f',
            left=2))
    rows = [[
        r['model'], r['size'], MODE_NAMES[r['mode']], r['median_ms'],
        r['iqr_ms'], r['images_per_s'], r['peak_mem_mb'], r['saved_mb']
    ] for r in report['results']]
    lines += [
        '',
        markdown_table([
            'model', 'size', 'step', 'median ms', 'IQR ms', 'img/s',
            'peak mem MiB', 'saved MiB'
        ],
                       rows,
                       spec=['', '', '', '.1f', '.1f', '.2f', '.1f', '.2f'],
                       left=1)
    ]
    return '\n'.join(lines)


def csv_table(report: Dict) -> Tuple[List[str], List[List]]:
    """Header and one row per model, size and mode."""
    return list(RESULT_COLUMNS), [[r[c] for c in RESULT_COLUMNS]
                                  for r in report['results']]


def figure(report: Dict):
    """Median time and peak memory against the input size, per model."""
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4.2))
    styles = {
        'infer': '-o',
        'train': '--s',
        'attack': ':^',
        'attack-adaptive': '-.v',
        APGD_MODE: ':x'
    }
    for i, m in enumerate(report['models']):
        for mode, style in styles.items():
            rows = [
                r for r in report['results']
                if r['model'] == m['name'] and r['mode'] == mode
            ]
            if not rows:
                continue
            sizes = [r['size'] for r in rows]
            label = f"{m['name']} {MODE_NAMES[mode]}"
            axes[0].plot(
                sizes, [r['median_ms'] for r in rows],
                style,
                color=f'C{i}',
                label=label)
            mem = [(r['size'], r['peak_mem_mb']) for r in rows
                   if r['peak_mem_mb'] is not None]
            if mem:
                axes[1].plot(*zip(*mem), style, color=f'C{i}', label=label)
    axes[0].set_ylabel('median time per step (ms)')
    axes[1].set_ylabel('peak memory (MiB)')
    for ax in axes:
        ax.set_xlabel('input size (pixels per side)')
        ax.grid(True, alpha=.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
