"""Corruption robustness: mIoU under image corruptions, models side by side.

:mod:`.pipeline` inserts the corruption into a config's test pipeline,
:mod:`.store` keeps every finished cell (resumable), :mod:`.evaluator` runs
mmengine's test loop on a built model, :mod:`.grid` drives the grid and
:mod:`.report` writes it. ``tools/analysis_tools/robustness.py`` is the
command line.
"""
from .evaluator import CellEvaluator
from .grid import GROUPS, resolve_corruptions, run_grid, with_per_class_iou
from .pipeline import (corrupted_loader_cfg, dataset_pipelines,
                       insert_after_loading)
from .report import (csv_rows, heatmaps, markdown_tables, summarise,
                     write_robustness_report)
from .store import CLEAN, GridError, ResultStore, cell_key

__all__ = [
    'CellEvaluator', 'GROUPS', 'resolve_corruptions', 'run_grid',
    'with_per_class_iou', 'corrupted_loader_cfg', 'dataset_pipelines',
    'insert_after_loading', 'csv_rows', 'heatmaps', 'markdown_tables',
    'summarise', 'write_robustness_report', 'CLEAN', 'GridError',
    'ResultStore', 'cell_key'
]
