"""Evidence tools' helpers: hooks, collapse and robustness statistics.

Nothing here changes a model: recording exists only inside a
:class:`LayerRecorder` ``with`` block (:func:`as_elliptical` converts mmseg's
model in place, computing the same, when its probabilities are wanted).
"""
from .hooks import (LayerRecord, LayerRecorder, TransformerLayers,
                    as_elliptical, transformer_layers, unwrap)
from .maps import query_patch, upsample
from .metrics import mean_pairwise_cosine, relevance_spread

__all__ = [
    'LayerRecord', 'LayerRecorder', 'TransformerLayers', 'as_elliptical',
    'mean_pairwise_cosine', 'query_patch', 'relevance_spread',
    'transformer_layers', 'unwrap', 'upsample'
]
