"""The method's evidence and the comparison report (docs/install.md):
``evidence/`` (what the layers compute: collapse, attention maps, tokens)
and ``comparison/`` (the one report over evidence, robustness and speed;
the robustness kit itself is :mod:`mmseg_elliptical.robustness`). Gathered
here: what the layers compute, not the reports (``import mmseg_elliptical``
takes this in through the evidence hook)."""
from ..utils.loaders import subset_loader_cfg
from .evidence.attention_figures import (attention_figure, plot_attention,
                                         plot_relevance, relevance_figure,
                                         shown_heads, shown_layers)
from .evidence.attention_maps import attention_of, image_maps, model_attention
from .evidence.collapse_meter import (RELEVANCE_KEYS, CollapseMeter,
                                      measure_collapse)
from .evidence.entropy import layer_entropy
from .evidence.layers import (AnalysisError, TransformerLayers,
                              transformer_layers)
from .evidence.measures import (attention_entropy, mean_pairwise_cosine,
                                relevance_spread, relevance_statistics)
from .evidence.recorder import LayerRecord, LayerRecorder
from .evidence.tokens import (attention_row, grid_to_image, input_point,
                              query_token, slide_boxes, window_keys)

__all__ = [
    'attention_figure', 'plot_attention', 'plot_relevance', 'relevance_figure',
    'shown_heads', 'shown_layers', 'attention_of', 'image_maps',
    'model_attention', 'RELEVANCE_KEYS', 'CollapseMeter', 'measure_collapse',
    'layer_entropy', 'attention_entropy', 'relevance_statistics',
    'AnalysisError', 'TransformerLayers', 'transformer_layers',
    'subset_loader_cfg', 'LayerRecord', 'LayerRecorder',
    'mean_pairwise_cosine', 'relevance_spread', 'attention_row',
    'grid_to_image', 'input_point', 'query_token', 'slide_boxes', 'window_keys'
]
