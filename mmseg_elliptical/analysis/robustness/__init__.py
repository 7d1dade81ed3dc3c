"""Robustness: models side by side on corrupted and attacked test sets.

:mod:`.protocols` names the cells (corruption sets and groups, the
``default``, ``ade20k-c`` and ``paper`` presets), :mod:`.pipeline` inserts
the corruption into a config's test pipeline, :mod:`.loop` runs one model's
cells through ``runner.test()``, :mod:`.store` keeps every finished cell
(resumable), :mod:`.grid` drives the grid, :mod:`.summary` computes P, mPC,
rPC, CE, mCE and rmCE, :mod:`.bootstrap` the paired test over images;
:mod:`.corruption_verdicts` / :mod:`.attack_verdicts` compute the
summaries and paired tests (:mod:`.paired`), :mod:`.corruption_report`,
:mod:`.corruption_figure` and :mod:`.attack_report` write them.
:mod:`.attacks` adds the adversarial cells (PGD, FGSM, SegPGD, CosPGD;
APGD with SEA's losses from :mod:`.apgd`, :mod:`.losses` and
:mod:`.class_weights`) to the same grid, :mod:`.square` the query attack,
:mod:`.transfer` the transfer cells, :mod:`.worst` SEA's worst case over
them, :mod:`.audit` the gradient-masking audit. The command lines:
``tools/analysis_tools/robustness.py`` and ``adversarial.py``.
"""
from .attack_report import attack_markdown, write_attack_report
from .attack_verdicts import attack_summary
from .attacks import (ATTACKS, LABELS, NORMS, PERTURBERS, AdversarialTestLoop,
                      Attack, perturb)
from .audit import audit_cells, audit_markdown, gradient_masking_audit
from .bootstrap import ImageAreas, miou, paired_bootstrap
from .class_weights import class_weights_of, weighted_cells
from .corruption_figure import heatmaps
from .corruption_report import (csv_rows, grid_markdown, summary_rows,
                                write_robustness_report)
from .corruption_verdicts import grid_summary, paired_test
from .elliptical import elliptical_models, has_elliptical_layers
from .grid import open_store, run_cells, run_grid, with_image_areas
from .loop import CellHook, CorruptionGridLoop
from .pipeline import (corrupted_loader_cfg, dataset_pipelines,
                       insert_after_loading)
from .protocols import (ATTACK_PROTOCOLS, CORRUPTION_SETS, GROUPS, PROTOCOLS,
                        AttackProtocol, Protocol, attack_cells,
                        attack_settings, group_of, model_cells,
                        resolve_corruptions, resolve_severities)
from .square import square_perturb
from .store import CLEAN, GridError, ResultStore, cell_key
from .summary import grid_scores, model_summary, robustness_summary
from .transfer import TransferAttack, TransferTestLoop, transfer_cells

__all__ = [
    'ATTACKS', 'LABELS', 'NORMS', 'AdversarialTestLoop', 'Attack',
    'elliptical_models', 'has_elliptical_layers', 'perturb', 'run_cells',
    'class_weights_of', 'weighted_cells', 'ATTACK_PROTOCOLS', 'AttackProtocol',
    'attack_cells', 'attack_settings', 'model_cells', 'attack_markdown',
    'attack_summary', 'write_attack_report', 'ImageAreas', 'miou',
    'paired_bootstrap', 'open_store', 'run_grid', 'with_image_areas',
    'CellHook', 'CorruptionGridLoop', 'corrupted_loader_cfg',
    'dataset_pipelines', 'insert_after_loading', 'CORRUPTION_SETS', 'GROUPS',
    'PROTOCOLS', 'Protocol', 'group_of', 'resolve_corruptions',
    'resolve_severities', 'csv_rows', 'grid_summary', 'heatmaps',
    'grid_markdown', 'paired_test', 'summary_rows', 'write_robustness_report',
    'CLEAN', 'GridError', 'ResultStore', 'cell_key', 'grid_scores',
    'model_summary', 'robustness_summary', 'PERTURBERS', 'square_perturb',
    'TransferAttack', 'TransferTestLoop', 'transfer_cells', 'audit_cells',
    'audit_markdown', 'gradient_masking_audit'
]
