"""The run of ``tools/analysis_tools/adversarial.py`` once its command line
passed: the checks that read the models, the grid (with transfer, the
audit and its remedies) and the report."""
import argparse
import os.path as osp
from functools import partial
from typing import Dict, List

from mmengine.dist import broadcast_object_list, is_main_process

from .attacks.cells import AUDIT_PRESET, Attack, AuditPreset, attack_settings
from .attacks.class_weights import class_weights_of, weighted_cells
from .attacks.elliptical import elliptical_models
from .attacks.report import write_attack_report
from .attacks.transfer import transfer_cells
from .attacks.verdicts import attack_verdicts, correct_pixels
from .audit.cells import audit_cells, remedy_cells
from .audit.verdict import gradient_masking_audit
from .grid import run as grid_run
from .grid.protocols import command_cells, model_cells
from .grid.store import ResultStore


def check_models(parser: argparse.ArgumentParser,
                 args: argparse.Namespace) -> None:
    """Add ``elliptical`` (whether each model has elliptical layers) and
    ``class_weights`` (of the balanced attacks, counted once) to ``args``;
    ``--adaptive`` without an elliptical model is a command-line error."""
    args.elliptical = elliptical_models(args.specs, args.cfg_options)
    audit = [AUDIT_PRESET.sweep_attack] if args.audit else []
    args.class_weights = class_weights_of(args.attacks + audit, args.specs,
                                          args.cfg_options, args.work_dir)
    if args.adaptive and not any(args.elliptical.values()):
        names = ', '.join(s.name for s in args.specs)
        parser.error('argument --adaptive: no model has an elliptical layer '
                     f'({names}), so there is no relevance m to '
                     'differentiate through; drop --adaptive.')


def remedies(args: argparse.Namespace, store: ResultStore, cells: Dict,
             preset: AuditPreset) -> Dict[str, List]:
    """``{model: BPDA and EOT cells}`` of the models whose audit failed
    (decided on the main process, shared with the others)."""
    failed = [None]
    if is_main_process():
        failed[0] = [
            s.name for s in args.specs if gradient_masking_audit(
                store.data['models'][s.name]['cells'],
                partial(correct_pixels, store, s.name, read=store.areas),
                args.epsilons,
                args.elliptical.get(s.name, False),
                preset=preset)['verdict'].startswith('failed: ')
        ]
    broadcast_object_list(failed)
    return {
        name: remedy_cells(cells[name], max(args.epsilons), preset)
        for name in failed[0]
    }


def attack_grid(args: argparse.Namespace, launch: Dict) -> ResultStore:
    """Run every model's cells (``launch``: the runners' launcher options):
    plain, adaptive, transferred and the audit's; with ``--audit``, then
    BPDA and EOT on the models whose audit failed."""
    cells = weighted_cells(
        model_cells(args.elliptical, args.cells,
                    command_cells(args, True) if args.adaptive else []),
        args.class_weights)
    if args.transfer is not None:
        source = next(s for s in args.specs if s.name == args.transfer)
        crafted = transfer_cells(
            [c for c in cells[source.name] if isinstance(c, Attack)], source,
            args.cfg_options)
        for name in cells:
            if name != source.name:
                cells[name] += crafted
    if args.audit:
        preset = AUDIT_PRESET._replace(
            sweep_steps=args.audit_sweep_steps,
            queries=args.queries or AUDIT_PRESET.queries)
        cells = audit_cells(
            cells,
            args.specs,
            args.epsilons,
            preset.queries,
            args.step_ratio,
            args.cfg_options,
            arms=args.arms,
            preset=preset,
            class_weights=args.class_weights)
    run = partial(
        grid_run.run_cells,
        args.specs,
        path=osp.join(args.work_dir, 'adversarial.json'),
        work_dir=args.work_dir,
        seed=args.seed,
        max_images=args.max_images,
        cfg_options=args.cfg_options,
        quiet=not args.verbose,
        per_class=True,
        launch_options=launch,
        batch_size=args.batch_size,
        settings=attack_settings(args.norm, args.step_size, args.step_ratio,
                                 args.random_start, args.labels))
    store = run(cells)
    if args.audit:
        extra = remedies(args, store, cells, preset)
        if extra:  # BPDA and EOT on the models that failed the audit
            store = run({n: cells[n] + extra.get(n, []) for n in cells})
    return store


def attack_report(args: argparse.Namespace, store: ResultStore) -> str:
    """Write ``adversarial.{md,csv,png}`` of the grid (main process);
    return the markdown."""
    verdicts = attack_verdicts(store, [s.name for s in args.specs],
                               args.baseline, args.resamples,
                               args.bootstrap_seed, args.epsilons,
                               args.elliptical if args.audit else None,
                               args.arms)
    return write_attack_report(verdicts, args.work_dir)
