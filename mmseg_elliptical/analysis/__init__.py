"""The evidence: representation collapse, attention maps, robustness, and
the report that compares models side by side (docs/evidence.md)."""
from .attention_figures import (plot_attention, plot_relevance, shown_heads,
                                shown_layers)
from .attention_maps import image_maps, model_attention
from .collapse import CollapseMeter, measure_collapse, write_collapse_report
from .layers import AnalysisError, TransformerLayers, transformer_layers
from .loaders import subset_loader_cfg
from .measures import mean_pairwise_cosine, relevance_spread
from .recorder import LayerRecord, LayerRecorder
from .tokens import (attention_row, grid_to_image, input_point, query_token,
                     slide_boxes, window_keys)

__all__ = [
    'plot_attention', 'plot_relevance', 'shown_heads', 'shown_layers',
    'image_maps', 'model_attention', 'CollapseMeter', 'measure_collapse',
    'write_collapse_report', 'AnalysisError', 'TransformerLayers',
    'transformer_layers', 'subset_loader_cfg', 'LayerRecord', 'LayerRecorder',
    'mean_pairwise_cosine', 'relevance_spread', 'attention_row',
    'grid_to_image', 'input_point', 'query_token', 'slide_boxes', 'window_keys'
]
