"""Robustness: models side by side on corrupted and attacked test sets, in
four rooms whose imports run downwards (docs/install.md):

* :mod:`.attacks`: PGD, FGSM, SegPGD, CosPGD; APGD with SEA's losses;
  Square, transfer, class weights, which models have ``m``; randomised
  smoothing's draws and tests (SegCertify);
* :mod:`.grid`: the cells, the loop that runs them through
  ``runner.test()``, the resumable store and its per-image areas, the
  corrupted pipelines, the protocols and the audit's extra cells;
* :mod:`.verdicts`: the summary (P, mPC, rPC, CE, mCE, rmCE), SEA's worst
  case, the paired and hierarchical bootstraps, arms, the audit; computed
  once per store into a :class:`.verdicts.record.Verdicts`;
* :mod:`.reports`: markdown, CSV and figures that read those verdicts.

The command lines: ``tools/analysis_tools/robustness.py``,
``adversarial.py`` and ``certify.py``. The names below are the public ones
(this package gathers them; old module paths warn, see CHANGELOG.md).
"""
from ...utils.attack_cells import (ATTACK_PROTOCOLS, ATTACKS, AUDIT_PRESET,
                                   LABELS, NORMS, PERTURBERS, Attack,
                                   AttackProtocol, AuditPreset, attack_cells,
                                   attack_settings)
from ...utils.corruption_cells import (CORRUPTION_SETS, GROUPS, PROTOCOLS,
                                       Protocol, group_of, resolve_corruptions,
                                       resolve_severities)
from ..loaders import dataset_pipelines, insert_after_loading
from .attacks.class_weights import class_weights_of, weighted_cells
from .attacks.elliptical import elliptical_models, has_elliptical_layers
from .attacks.pgd import AdversarialTestLoop, perturb
from .attacks.square import square_perturb
from .attacks.transfer import TransferAttack, TransferTestLoop, transfer_cells
from .grid.areas import ImageAreas, miou
from .grid.audit_cells import audit_cells, remedy_cells
from .grid.certify_loop import CertifyTestLoop, certify_image
from .grid.loop import CellHook, CorruptionGridLoop
from .grid.pipeline import corrupted_loader_cfg
from .grid.protocols import model_cells
from .grid.run import open_store, run_cells, run_grid, with_image_areas
from .grid.store import CLEAN, GridError, ResultStore, cell_key
from .reports.attacks import attack_markdown, write_attack_report
from .reports.audit import audit_markdown
from .reports.certify import write_certify_report
from .reports.corruption_figure import heatmaps
from .reports.corruptions import (csv_rows, grid_markdown, summary_rows,
                                  write_robustness_report)
from .verdicts.attacks import attack_summary, attack_verdicts
from .verdicts.audit import gradient_masking_audit
from .verdicts.bootstrap import paired_bootstrap
from .verdicts.certify import certify_verdicts
from .verdicts.corruptions import (corruption_verdicts, grid_summary,
                                   paired_test)
from .verdicts.record import Verdicts
from .verdicts.summary import grid_scores, model_summary, robustness_summary

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
    'remedy_cells', 'AUDIT_PRESET', 'AuditPreset', 'audit_markdown',
    'gradient_masking_audit', 'attack_verdicts', 'corruption_verdicts',
    'Verdicts', 'CertifyTestLoop', 'certify_image', 'certify_verdicts',
    'write_certify_report'
]
