"""The evidence: representation collapse, attention maps, robustness, and
the report that compares models side by side (docs/evidence.md)."""
from .attention_figures import (attention_figure, plot_attention,
                                plot_relevance, relevance_figure, shown_heads,
                                shown_layers)
from .attention_maps import attention_of, image_maps, model_attention
from .collapse import (RELEVANCE_KEYS, CollapseMeter, measure_collapse,
                       write_collapse_report)
from .entropy import layer_entropy
from .layers import AnalysisError, TransformerLayers, transformer_layers
from .loaders import subset_loader_cfg
from .measures import (attention_entropy, mean_pairwise_cosine,
                       relevance_spread, relevance_statistics)
from .recorder import LayerRecord, LayerRecorder
from .tokens import (attention_row, grid_to_image, input_point, query_token,
                     slide_boxes, window_keys)

__all__ = [
    'attention_figure', 'plot_attention', 'plot_relevance', 'relevance_figure',
    'shown_heads', 'shown_layers', 'attention_of', 'image_maps',
    'model_attention', 'RELEVANCE_KEYS', 'CollapseMeter', 'measure_collapse',
    'layer_entropy', 'attention_entropy', 'relevance_statistics',
    'write_collapse_report', 'AnalysisError', 'TransformerLayers',
    'transformer_layers', 'subset_loader_cfg', 'LayerRecord', 'LayerRecorder',
    'mean_pairwise_cosine', 'relevance_spread', 'attention_row',
    'grid_to_image', 'input_point', 'query_token', 'slide_boxes', 'window_keys'
]
