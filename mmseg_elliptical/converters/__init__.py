"""Checkpoint converters (``tools/model_converters/`` are their command
lines)."""
from .deit import SourceError, convert_deit, load_source, state_dict_of

__all__ = ['SourceError', 'convert_deit', 'load_source', 'state_dict_of']
