"""The comparison report: every section measured (or resumed), then
``report.md``, ``report.json`` and the figures in one folder."""
import json
import os
import os.path as osp
import time
from typing import Dict, List, Optional, Sequence

import cv2
from mmengine.dist import is_main_process

from ...benchmark.timing import paired_ratio
from ...robustness.attacks.cells import ATTACK_PROTOCOLS
from ...robustness.attacks.elliptical import elliptical_models
from ...robustness.attacks.report import attack_markdown, write_attack_report
from ...robustness.attacks.verdicts import attack_verdicts
from ...robustness.corruption.cells import resolve_corruptions
from ...robustness.corruption.report import write_robustness_report
from ...robustness.corruption.verdicts import corruption_verdicts
from ...robustness.grid.store import ResultStore
from ...robustness.seeds.report import RUN_BY_RUN, arms_markdown, verdict_lines
from ...utils.config import ModelSpec
from ...utils.output import markdown_table
from ..evidence.attention_figures import (plot_attention, plot_relevance,
                                          shown_heads, shown_layers)
from ..evidence.collapse import write_collapse_report
from ..evidence.layers import AnalysisError
from . import sections
from .plan import SECTION_SECONDS, Countdown
from .sections import ReportOptions


def accuracy_table(store: ResultStore, names: Sequence[str]) -> str:
    """Clean mIoU, aAcc, mAcc and the IoU of every class (rows), models
    side by side (columns)."""
    cells = {n: store.data['models'][n]['cells']['clean'] for n in names}
    keys = ['mIoU', 'aAcc', 'mAcc']
    classes = [k for k in cells[names[0]] if k.startswith('IoU.')]
    rows = [[k] + [cells[n].get(k) for n in names] for k in keys + classes]
    return markdown_table(['metric', *names], rows, spec='.2f')


def speed_table(speed: Dict[str, Dict], baseline: str) -> str:
    """Median time and peak memory per model, and each model over the
    baseline (time: median of the per-round ratios, interquartile range).
    """
    names = list(speed)
    ref = speed[baseline]
    rows = []
    for n in names:
        row = [n]
        for mode in ('infer', 'train'):
            r = speed[n][mode]
            row += [r['median_ms'], r['peak_mem_mb']]
        for mode in ('infer', 'train'):
            a, b = speed[n][mode], ref[mode]
            ratio = paired_ratio(a['round_ms'], b['round_ms'])
            row.append(f'{ratio.median:.3f} ({ratio.q1:.3f}-{ratio.q3:.3f})')
            row.append(a['peak_mem_mb'] / b['peak_mem_mb']
                       if a['peak_mem_mb'] and b['peak_mem_mb'] else None)
        rows.append(row)
    return markdown_table([
        'model', 'inference ms', 'inference peak MiB', 'training step ms',
        'training peak MiB', f'time inference / {baseline}',
        f'memory inference / {baseline}', f'time training / {baseline}',
        f'memory training / {baseline}'
    ], rows)


def _models_table(specs: Sequence[ModelSpec]) -> str:
    return markdown_table(['model', 'config', 'checkpoint'],
                          [[s.name, s.config, s.checkpoint] for s in specs],
                          left=3)


def arms_of(specs: Sequence[ModelSpec],
            options: ReportOptions) -> Dict[str, List[str]]:
    """``options.arms``, or each model an arm of one run."""
    return options.arms or {s.name: [s.name] for s in specs}


def baseline_of(specs: Sequence[ModelSpec], options: ReportOptions) -> str:
    """The arm the others are compared with (corruption errors, paired
    tests, speed ratios): ``options.baseline``, by default the last one."""
    names = list(arms_of(specs, options))
    baseline = options.baseline or names[-1]
    if baseline not in names:
        raise AnalysisError(f'baseline {baseline!r} is none of the models '
                            f'{names}.')
    return baseline


def attacked_images(options: ReportOptions) -> str:
    """``; the first N test images`` when the section attacks fewer."""
    n = sections.attack_images(options)
    return f'; the first {n} test images' if n else ''


def write_markdown(specs: Sequence[ModelSpec], options: ReportOptions,
                   parts: Dict, work_dir: str) -> str:
    """``report.md`` of the measured sections; returns its text."""
    names = [s.name for s in specs]
    arms = arms_of(specs, options)
    corruptions = resolve_corruptions(options.corruptions)
    severities = sorted(set(options.severities))
    store = parts['robustness']
    robustness = write_robustness_report(
        corruption_verdicts(
            store,
            names,
            corruptions,
            severities,
            'mIoU',
            baseline_of(specs, options),
            resamples=options.resamples,
            seed=options.bootstrap_seed,
            arms=arms), work_dir)
    collapse = write_collapse_report(parts['collapse'], work_dir, options.part,
                                     arms)
    several = any(len(r) > 1 for r in arms.values())
    attacked = parts['adversarial']
    write_attack_report(
        attack_verdicts(
            attacked,
            names,
            baseline_of(specs, options),
            resamples=options.resamples,
            seed=options.bootstrap_seed,
            epsilons=ATTACK_PROTOCOLS[options.attack_protocol].epsilons,
            audit=elliptical_models(specs, options.cfg_options)
            if options.audit else None,
            arms=arms), work_dir)
    adversarial = attack_markdown(attacked.data['summary'],
                                  attacked.data['settings'])
    verdicts: List[str] = []
    if several:
        adversarial = arms_markdown(attacked.data['arms']) + RUN_BY_RUN + \
            adversarial
        verdicts = [
            '## Verdicts across seeds', '',
            'Each arm against the baseline arm (hierarchical paired '
            'bootstrap and Welch\'s interval; the sections below give the '
            'numbers, then each run\'s own).', '',
            *verdict_lines(store.data['arms']),
            *verdict_lines(attacked.data['arms']), ''
        ]
    preset = ATTACK_PROTOCOLS[options.attack_protocol]
    speed = parts['speed']
    meta = next(iter(speed.values()))['meta']
    image, point = parts['query']
    images = options.max_images or 'all'
    text = [
        f'# Comparison of {", ".join(names)}', '',
        _models_table(specs), '',
        f'Test split of each config ({images} images), ' +
        ('one run per model.' if not several else
         f'arms of {", ".join(str(len(r)) for r in arms.values())} runs '
         '(training seeds); in each section the arms\' mean +- sd and '
         'their hierarchical paired test first, then each run\'s own '
         'numbers (docs/evidence.md).'), '', *verdicts,
        '## Accuracy (clean test split)', '',
        accuracy_table(store, names), '',
        f'## Robustness: {", ".join(corruptions)} at severities '
        f'{", ".join(map(str, severities))}', '',
        f'P: clean mIoU; mPC: its mean over the corrupted cells; rPC = mPC / '
        f'P; CE: corruption error (100 - mIoU) over '
        f'{baseline_of(specs, options)}\'s, mCE its mean, rCE and rmCE the '
        'same for the drop from the clean mIoU (definitions: '
        'docs/evidence.md). The intervals: a paired bootstrap over the '
        'images.', '', robustness, '',
        '![mIoU per corruption and severity](robustness.png)', '',
        f'## Adversarial robustness ({options.attack_protocol} preset: '
        f'{preset.description}'
        f'{"; adaptive: through m too" if options.adaptive else ""}'
        f'{attacked_images(options)})', '', adversarial, '',
        '![mIoU against eps](adversarial.png)', '',
        f'## Representation collapse ({options.part})', '',
        'Mean pairwise cosine of the tokens each layer outputs (forward '
        'order across stages; cls token and class embeddings left out), '
        'and the spread of `m` in elliptical layers.', '', collapse,
        '![Mean pairwise cosine per layer](collapse.png)', '',
        f'## Attention ({options.part})', '',
        f'Query pixel ({point[0]}, {point[1]}) of `{image}`; each map '
        'scaled to its own maximum.', '',
        '![Attention of one query token](attention.png)', ''
    ]
    if osp.exists(osp.join(work_dir, 'attention_relevance.png')):
        text += ['![Relevance m per head](attention_relevance.png)', '']
    text += [
        f'## Speed and peak memory ({options.speed_size}x'
        f'{options.speed_size}, batch {options.speed_batch})', '',
        f'Each config\'s segmentor (`mode="tensor"`), inference and one '
        f'training step, torch threads: {meta["threads"]}, '
        f'{options.speed_rounds} interleaved rounds on '
        f'{meta["device_name"]}; peak memory: '
        f'{next(iter(speed.values()))["infer"]["memory_measure"]}.', '',
        speed_table(speed, arms[baseline_of(specs, options)][0])
    ]
    text = '\n'.join(text)
    with open(osp.join(work_dir, 'report.md'), 'w') as f:
        f.write(text)
    return text


def write_figures(parts: Dict, options: ReportOptions, work_dir: str) -> None:
    """``attention.png`` and ``attention_relevance.png``."""
    image, point = parts['query']
    results = parts['attention']
    layers = shown_layers(results)
    heads = shown_heads(results, layers, options.heads)
    picture = cv2.cvtColor(cv2.imread(image), cv2.COLOR_BGR2RGB)
    plot_attention(picture, results, point, layers, heads, True,
                   osp.join(work_dir, 'attention.png'))
    rel = osp.join(work_dir, 'attention_relevance.png')
    if not plot_relevance(results, rel, options.part) and osp.exists(rel):
        os.remove(rel)


def report_data(specs: Sequence[ModelSpec], options: ReportOptions,
                parts: Dict, seconds: float) -> Dict:
    """``report.json``: settings, models and every section's numbers (the
    attention maps themselves are in ``cells/attention.json``)."""
    names = [s.name for s in specs]
    store = parts['robustness']
    cells = {n: store.data['models'][n]['cells'] for n in names}
    attention = {
        n:
        dict(
            layers={
                i:
                dict(
                    off_grid=e['off_grid'].tolist(),
                    grid=e['grid'],
                    stride=e['stride'],
                    query=e['query'],
                    stage=e['stage'])
                for i, e in r['layers'].items()
            },
            num_layers=r['num_layers'],
            box=r['box'])
        for n, r in parts['attention'].items()
    }
    options = dict(vars(options))
    del options['launch']
    return dict(
        options=options,
        models=[s._asdict() for s in specs],
        accuracy={n: cells[n]['clean']
                  for n in names},
        robustness=store.data['summary'],
        adversarial=parts['adversarial'].data['summary'],
        arms=dict(
            robustness=store.data.get('arms'),
            adversarial=parts['adversarial'].data.get('arms')),
        collapse=parts['collapse'],
        attention=dict(
            image=parts['query'][0], point=parts['query'][1],
            models=attention),
        speed={
            n: {
                m: {
                    k: v[m][k]
                    for k in ('median_ms', 'iqr_ms', 'peak_mem_mb',
                              'memory_measure', 'round_ms')
                }
                for m in ('infer', 'train')
            }
            for n, v in parts['speed'].items()
        },
        seconds=round(seconds, 1))


def compare_models(specs: Sequence[ModelSpec],
                   options: ReportOptions,
                   work_dir: str,
                   quiet: bool = True) -> Optional[Dict]:
    """Measure (or resume) every section and write the report.

    Args:
        specs (Sequence[ModelSpec]): Two or more models.
        options (ReportOptions): What to measure.
        work_dir (str): The report folder (also holds ``cells/``).
        quiet (bool): Hide the test runners' INFO logs.

    Returns:
        dict: The data of ``report.json`` (None on the processes but rank
        0).
    """
    if len(specs) < 2:
        raise AnalysisError(f'The report compares two or more models, got '
                            f'{len(specs)}.')
    baseline_of(specs, options)
    start = time.time()
    countdown = Countdown(SECTION_SECONDS,
                          print if is_main_process() else lambda _: None)
    countdown.announce('compare_models')
    parts: Dict[str, object] = {}
    parts['robustness'] = sections.accuracy_and_robustness(
        specs, options, work_dir, quiet)
    countdown.done()
    parts['adversarial'] = sections.adversarial(specs, options, work_dir,
                                                quiet)
    countdown.done()
    parts['collapse'] = sections.collapse(specs, options, work_dir)
    if not is_main_process():
        return None
    os.makedirs(work_dir, exist_ok=True)
    image, point, parts['attention'] = sections.attention(
        specs, options, work_dir)
    parts['query'] = (image, point)
    parts['speed'] = sections.speed(specs, options, work_dir)
    countdown.done()
    write_figures(parts, options, work_dir)
    write_markdown(specs, options, parts, work_dir)
    data = report_data(specs, options, parts, time.time() - start)
    with open(osp.join(work_dir, 'report.json'), 'w') as f:
        json.dump(data, f, indent=1)
    return data


def report_files(work_dir: str) -> List[str]:
    """The report's files, for the tool to print."""
    names = ('report.md', 'report.json', 'robustness.png', 'adversarial.png',
             'collapse.png', 'attention.png', 'attention_relevance.png')
    return [
        osp.join(work_dir, n) for n in names
        if osp.exists(osp.join(work_dir, n))
    ]
