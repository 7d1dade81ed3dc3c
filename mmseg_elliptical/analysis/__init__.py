"""The evidence: representation collapse, attention maps, robustness.

Nothing here changes a model unless asked: recording exists only inside a
:class:`LayerRecorder` ``with`` block, and ``transformer_layers(...,
convert=True)`` converts mmseg's own model in place to its elliptical
version in dot-product mode (it computes the same) when its probabilities
are wanted. Each analysis has its module (:mod:`.collapse`,
:mod:`.attention_maps`, :mod:`.robustness`, :mod:`.seed_sweep`); the tools
under ``tools/analysis_tools/`` are their command lines.
"""
from .attention_maps import (model_attention, plot_attention, plot_relevance,
                             query_patch, upsample)
from .collapse import measure_collapse, write_collapse_report
from .layers import TransformerLayers, transformer_layers
from .loaders import subset_loader_cfg
from .recorder import LayerRecord, LayerRecorder
from .statistics import mean_pairwise_cosine, relevance_spread

__all__ = [
    'model_attention', 'plot_attention', 'plot_relevance', 'query_patch',
    'upsample', 'measure_collapse', 'write_collapse_report',
    'TransformerLayers', 'transformer_layers', 'subset_loader_cfg',
    'LayerRecord', 'LayerRecorder', 'mean_pairwise_cosine', 'relevance_spread'
]
