"""Helpers of the tools and the package: configs, mmseg's files, reports."""
from .config import (ModelSpec, load_config, model_names, model_specs,
                     split_loader)
from .mmseg_files import mmseg_config_path, mmseg_tool_path
from .report import markdown_table, pyplot, save_figure, write_report

__all__ = [
    'ModelSpec', 'load_config', 'model_names', 'model_specs', 'split_loader',
    'mmseg_config_path', 'mmseg_tool_path', 'markdown_table', 'pyplot',
    'save_figure', 'write_report'
]
