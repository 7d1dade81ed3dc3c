"""One report that compares models side by side: clean mIoU (per class),
corruption robustness, representation collapse, attention maps, speed and
peak memory. :mod:`.sections` measures (resumable), :mod:`.report` writes.
"""
from .report import accuracy_table, compare_models, report_files, speed_table
from .sections import DEFAULT_CORRUPTIONS, ReportOptions

__all__ = [
    'accuracy_table', 'compare_models', 'report_files', 'speed_table',
    'DEFAULT_CORRUPTIONS', 'ReportOptions'
]
