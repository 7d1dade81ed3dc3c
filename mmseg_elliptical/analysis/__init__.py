"""Evidence tools' helpers: hooks, attention maps, collapse, robustness.

Nothing here changes a model: hooks exist only inside a
:class:`LayerRecorder` ``with`` block.
"""
from .attention import attention_probs
from .hooks import (LayerRecord, LayerRecorder, TransformerLayers,
                    transformer_layers, unwrap)
from .metrics import mean_pairwise_cosine, relevance_spread

__all__ = [
    'LayerRecord', 'LayerRecorder', 'TransformerLayers', 'attention_probs',
    'mean_pairwise_cosine', 'relevance_spread', 'transformer_layers', 'unwrap'
]
