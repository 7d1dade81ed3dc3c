"""The sections of the comparison report, each measured once and kept in a
store under ``<work_dir>/cells/`` (docs/evidence.md)."""
import json
import os
import os.path as osp
import shutil
from dataclasses import dataclass, field, fields
from typing import Callable, Dict, List, Optional, Sequence

import cv2
from mmengine.logging import print_log
from mmengine.registry import init_default_scope
from mmengine.utils import ProgressBar
from mmseg.registry import DATASETS

from ... import benchmark
from ...robustness.attacks.cells import ATTACK_PROTOCOLS, AuditPreset
from ...robustness.attacks.class_weights import class_weights_of
from ...robustness.attacks.elliptical import elliptical_models
from ...robustness.audit.cells import audit_cells
from ...robustness.corruption.cells import (DEFAULT_CORRUPTIONS,
                                            resolve_corruptions)
from ...robustness.grid.protocols import model_cells
from ...robustness.grid.run import open_store, run_cells, run_grid
from ...robustness.grid.store import ResultStore
from ...utils.config import ModelSpec, load_config
from ..evidence.attention_maps import from_json, model_attention, to_json
from ..evidence.collapse_meter import measure_collapse
from ..evidence.layers import AnalysisError


@dataclass
class ReportOptions:
    """What the comparison report measures.

    Attributes:
        corruptions (list[str]): Corruptions (names or groups).
        severities (list[int]): Their severities.
        max_images (int, optional): Use only the first test images.
        seed (int): Seed of the corruptions and of the speed models' weights.
        part (str): ``'backbone'`` or ``'decode_head'``.
        image (str, optional): Image of the attention figure.
        point (tuple[int, int], optional): Its query pixel ``(x, y)``.
        layers (list[int], optional): Layers of the attention figure.
        heads (list[int], optional): Heads of the attention figure.
        speed_size (int): Square input size of the speed section.
        speed_batch (int): Images per step.
        speed_rounds (int): Interleaved timing rounds.
        baseline (str, optional): The arm compared with (default: last).
        arms (dict, optional): ``{arm: [runs]}`` (default: each model an
            arm of one run).
        resamples (int): Resamples of the paired bootstrap.
        bootstrap_seed (int): Its seed.
        cfg_options (dict): Overrides of every config.
        device (str): Device.
        launch (dict): The runners' launcher options.
        attack_protocol (str): The adversarial section's preset
            (:data:`~..robustness.ATTACK_PROTOCOLS`).
        adaptive (bool): Also attack the elliptical models through ``m``.
        audit (bool): Add the gradient-masking audit's cells (the preset's
            first attack swept to 255 levels, doubled steps, transfer between
            the models, ``audit_queries`` square queries) and verdicts.
        audit_queries (int): The audit's square-attack queries.
        attack_max_images (int, optional): Attack only the first test
            images (the fewer of this and ``max_images``).
        attack_batch_size (int, optional): Images attacked together
            (default: the config's test batch).
    """
    corruptions: List[str] = field(
        default_factory=lambda: list(DEFAULT_CORRUPTIONS))
    severities: List[int] = field(default_factory=lambda: [1, 5])
    max_images: Optional[int] = None
    seed: int = 0
    part: str = 'backbone'
    image: Optional[str] = None
    point: Optional[Sequence[int]] = None
    layers: Optional[List[int]] = None
    heads: Optional[List[int]] = None
    speed_size: int = 512
    speed_batch: int = 1
    speed_rounds: int = 10
    baseline: Optional[str] = None
    arms: Optional[Dict[str, List[str]]] = None
    resamples: int = 1000
    bootstrap_seed: int = 0
    cfg_options: Dict = field(default_factory=dict)
    device: str = 'cpu'
    launch: Dict = field(default_factory=dict)
    attack_protocol: str = 'quick'
    adaptive: bool = True
    audit: bool = True
    audit_queries: int = 20
    attack_max_images: Optional[int] = None
    attack_batch_size: Optional[int] = None

    @classmethod
    def from_args(cls, args) -> 'ReportOptions':
        """The options of ``compare_models.py``'s parsed command line."""
        given = {
            f.name: getattr(args, f.name)
            for f in fields(cls) if hasattr(args, f.name)
        }
        return cls(**dict(
            given,
            cfg_options=args.cfg_options or {},
            adaptive=not args.no_adaptive,
            audit=not args.no_audit))


def attack_images(options: ReportOptions) -> Optional[int]:
    """The adversarial section's images: the fewer of ``max_images`` and
    ``attack_max_images`` (None: all)."""
    given = [n for n in (options.max_images, options.attack_max_images) if n]
    return min(given) if given else None


def store_of(work_dir: str,
             section: str,
             settings: Dict,
             specs: Sequence[ModelSpec],
             every_process: bool = False) -> ResultStore:
    """The section's store under ``<work_dir>/cells/``, models declared;
    opened by every process or by rank 0 alone."""
    path = osp.join(work_dir, 'cells', f'{section}.json')
    if every_process:
        return open_store(path, settings, specs)
    store = ResultStore(path, settings)
    for spec in specs:
        store.add_model(*spec)
    return store


def stored(store: ResultStore, specs: Sequence[ModelSpec], key: str,
           compute: Callable[[ModelSpec], Optional[Dict]]) -> Dict:
    """``{name: result}`` of every model, computed and stored when missing
    (None results are not stored)."""
    for spec in specs:
        if store.get(spec.name, key) is None:
            print_log(f'{key}: {spec.name}', logger='current')
            result = compute(spec)
            if result is not None:
                store.put(spec.name, key, result)
    return {s.name: store.get(s.name, key) for s in specs}


def accuracy_and_robustness(specs: Sequence[ModelSpec],
                            options: ReportOptions,
                            work_dir: str,
                            quiet: bool = True) -> ResultStore:
    """Clean mIoU (per class too) and the corrupted cells of every model
    (:func:`~..robustness.grid.run_grid`)."""
    return run_grid(
        specs,
        resolve_corruptions(options.corruptions),
        sorted(set(options.severities)),
        osp.join(work_dir, 'cells'),
        'mIoU',
        options.seed,
        options.max_images,
        options.cfg_options,
        quiet=quiet,
        per_class=True,
        launch_options=options.launch)


#: The report's reduced audit: the preset's attack swept with 20
#: iterations to the whole range only (an honest demo twin reaches the
#: floor there; 5 PGD steps did not, and every run "failed" the sweep).
REPORT_AUDIT = AuditPreset(sweep_steps=20)
REPORT_SWEEP = (255., )


def adversarial(specs: Sequence[ModelSpec],
                options: ReportOptions,
                work_dir: str,
                quiet: bool = True) -> ResultStore:
    """Every model under the preset's attacks and, with ``adaptive``, the
    elliptical ones under the same attacks through ``m``
    (:func:`~..robustness.grid.run_cells`)."""
    preset = ATTACK_PROTOCOLS[options.attack_protocol]
    cells = model_cells(
        elliptical_models(specs, options.cfg_options), preset.cells(),
        preset.cells(adaptive=True) if options.adaptive else [])
    if options.audit:
        cells = audit_cells(
            cells,
            specs,
            preset.epsilons,
            options.audit_queries,
            preset.step_ratio,
            options.cfg_options,
            sweep=REPORT_SWEEP,
            doubled_attacks=preset.attacks[-1:],
            arms=options.arms,
            preset=REPORT_AUDIT,
            class_weights=class_weights_of([REPORT_AUDIT.sweep_attack], specs,
                                           options.cfg_options, work_dir))
    folder = osp.join(work_dir, 'cells', 'adversarial')
    move_old_attack_store(work_dir, folder)
    return run_cells(
        specs,
        cells,
        osp.join(folder, 'adversarial.json'),
        folder,
        max_images=attack_images(options),
        batch_size=options.attack_batch_size,
        cfg_options=options.cfg_options,
        quiet=quiet,
        per_class=True,
        launch_options=options.launch,
        settings=preset.settings())


def move_old_attack_store(work_dir: str, folder: str) -> None:
    """Move a report's attack store of an older version
    (``cells/adversarial.json``, its areas among the robustness grid's in
    ``cells/areas/``) into ``folder``, which the section has to itself: it
    may attack fewer images than the robustness grid tests, so their
    ``clean`` cells differ."""
    old = osp.join(work_dir, 'cells', 'adversarial.json')
    if not osp.isfile(old) or osp.exists(folder):
        return
    with open(old) as f:
        data = json.load(f)
    for name, model in data.get('models', {}).items():
        for key in model.get('cells', {}):
            src = osp.join(work_dir, 'cells', 'areas', name, f'{key}.npz')
            if osp.isfile(src):
                dst = osp.join(folder, 'areas', name, f'{key}.npz')
                os.makedirs(osp.dirname(dst), exist_ok=True)
                shutil.copy2(src, dst)
    os.makedirs(folder, exist_ok=True)
    os.replace(old, osp.join(folder, 'adversarial.json'))


def collapse(specs: Sequence[ModelSpec], options: ReportOptions,
             work_dir: str) -> Dict[str, Optional[Dict]]:
    """Collapse per layer of every model on the test split (None on the
    processes but rank 0)."""
    store = store_of(
        work_dir,
        'collapse',
        dict(
            part=options.part,
            max_images=options.max_images,
            cfg_options=options.cfg_options),
        specs,
        every_process=True)
    return stored(
        store, specs, 'collapse', lambda spec: measure_collapse(
            spec, 'test', options.part, options.max_images, options.
            cfg_options, options.device))


def first_test_image(spec: ModelSpec, cfg_options: Dict) -> str:
    """The image file of the first sample of a config's test dataset."""
    cfg = load_config(spec.config, cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    return dataset.get_data_info(0)['img_path']


def attention_query(specs: Sequence[ModelSpec],
                    options: ReportOptions) -> tuple:
    """The image and query pixel of the attention figure."""
    image = options.image or first_test_image(specs[0], options.cfg_options)
    if not osp.isfile(image):
        raise AnalysisError(f'image {image} does not exist.')
    point = options.point
    if point is None:
        h, w = cv2.imread(image).shape[:2]
        point = (w // 2, h // 2)
    return image, tuple(int(p) for p in point)


def attention(specs: Sequence[ModelSpec], options: ReportOptions,
              work_dir: str) -> tuple:
    """The attention maps and ``m`` of every model at one query pixel.

    Returns:
        tuple: ``image``, ``point`` and ``{name: model_attention(...)}``.
    """
    image, point = attention_query(specs, options)
    store = store_of(
        work_dir, 'attention',
        dict(
            image=osp.abspath(image),
            point=list(point),
            layers=options.layers,
            part=options.part,
            cfg_options=options.cfg_options), specs)
    found = stored(
        store, specs, 'attention', lambda spec: to_json(
            model_attention(spec, image, point, options.layers, options.part,
                            options.cfg_options, options.device)))
    return image, point, {n: from_json(r) for n, r in found.items()}


def speed(specs: Sequence[ModelSpec], options: ReportOptions,
          work_dir: str) -> Dict[str, Dict]:
    """Time and peak tensor memory of every segmentor, interleaved (all
    measured again when one is missing).

    Returns:
        dict: ``{name: {'infer': row, 'train': row}}`` (benchmark rows).
    """
    settings = dict(
        size=options.speed_size,
        batch_size=options.speed_batch,
        rounds=options.speed_rounds,
        seed=options.seed,
        device=options.device,
        cfg_options=options.cfg_options)
    store = store_of(work_dir, 'speed', settings, specs)
    if any(store.get(s.name, 'speed') is None for s in specs):
        bench = benchmark.BenchmarkOptions(
            sizes=[options.speed_size],
            train_sizes=[options.speed_size],
            batch_size=options.speed_batch,
            rounds=options.speed_rounds,
            device=options.device,
            memory='tensors',
            seed=options.seed)
        models = [
            benchmark.BenchModel(
                s.name,
                s.name,
                'model',
                s.config,
                dict(load_config(s.config, options.cfg_options).model),
                whole_model=True) for s in specs
        ]
        print_log(
            f'speed: {len(specs)} models at {options.speed_size}',
            logger='current')
        bar = ProgressBar(2 * options.speed_rounds * len(specs))
        data = benchmark.run_benchmark(models, bench, on_step=bar.update)
        bar.file.write('\n')
        for spec in specs:
            rows = {
                r['mode']: r
                for r in data['results'] if r['model'] == spec.name
            }
            store.put(spec.name, 'speed', dict(rows, meta=data['meta']))
    return {s.name: store.get(s.name, 'speed') for s in specs}
