"""Checkpoint converters (``tools/model_converters/`` are their command
lines)."""
from .deit import convert_deit, load_source, state_dict_of

__all__ = ['convert_deit', 'load_source', 'state_dict_of']
