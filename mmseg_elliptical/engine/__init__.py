"""Running mmseg's tools with the plugin: the checkpoint loader, the launch
helpers and the hooks."""
from ..errors import CheckpointError
from ..utils.files import check_checkpoint
from .checkpoint import (load_from_local, mmengine_safe_globals,
                         register_checkpoint_loader,
                         unregister_checkpoint_loader)
from .fit import (WeightsFit, check_models_fit, check_weights_fit,
                  checked_models, fitting_models, note_partial_loads,
                  weights_fit)
from .hooks import (AdversarialTrainingHook, EllipticalEvidenceHook,
                    SegSummaryHook)
from .launch import (end_process_group, prepare_cpu_launch, process_group,
                     run_mmseg_tool, start_launcher)
from .recipe_runner import AdversarialTrainingRunner

__all__ = [
    'CheckpointError', 'check_checkpoint', 'load_from_local',
    'mmengine_safe_globals', 'register_checkpoint_loader',
    'unregister_checkpoint_loader', 'WeightsFit', 'check_models_fit',
    'check_weights_fit', 'checked_models', 'fitting_models',
    'note_partial_loads', 'weights_fit', 'AdversarialTrainingHook',
    'EllipticalEvidenceHook', 'SegSummaryHook', 'end_process_group',
    'prepare_cpu_launch', 'process_group', 'run_mmseg_tool', 'start_launcher',
    'AdversarialTrainingRunner'
]
