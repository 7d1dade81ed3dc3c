from .checkpoint import (load_from_local, mmengine_safe_globals,
                         register_checkpoint_loader,
                         unregister_checkpoint_loader)
from .mmseg_tools import mmseg_config_path, mmseg_tool_path, run_mmseg_tool

__all__ = [
    'load_from_local', 'mmengine_safe_globals', 'register_checkpoint_loader',
    'unregister_checkpoint_loader',
    'mmseg_config_path', 'mmseg_tool_path', 'run_mmseg_tool'
]
