"""Helpers of the tools and the package: configs and what the tools write."""
from .config import (ModelSpec, load_config, mmseg_tool_path, model_names,
                     model_specs, split_loader)
from .output import (figure_array, markdown_table, pyplot, save_figure,
                     wrap_label, write_report)

__all__ = [
    'ModelSpec', 'load_config', 'mmseg_tool_path', 'model_names',
    'model_specs', 'split_loader', 'figure_array', 'markdown_table', 'pyplot',
    'save_figure', 'wrap_label', 'write_report'
]
