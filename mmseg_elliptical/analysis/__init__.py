"""The analyses, in rooms (docs/install.md): ``evidence/`` (what the layers
compute: collapse, attention maps, tokens), ``robustness/`` (``attacks/``,
``grid/``, ``verdicts/``, ``reports/``) and ``comparison/`` (the one report
over all of them); ``loaders`` holds the dataloader configs they share."""
from ..utils.moved import alias_moved
from .evidence.attention_figures import (attention_figure, plot_attention,
                                         plot_relevance, relevance_figure,
                                         shown_heads, shown_layers)
from .evidence.attention_maps import attention_of, image_maps, model_attention
from .evidence.collapse import (RELEVANCE_KEYS, CollapseMeter,
                                measure_collapse, write_collapse_report)
from .evidence.entropy import layer_entropy
from .evidence.layers import (AnalysisError, TransformerLayers,
                              transformer_layers)
from .evidence.measures import (attention_entropy, mean_pairwise_cosine,
                                relevance_spread, relevance_statistics)
from .evidence.recorder import LayerRecord, LayerRecorder
from .evidence.tokens import (attention_row, grid_to_image, input_point,
                              query_token, slide_boxes, window_keys)
from .loaders import subset_loader_cfg

#: The modules the rooms moved (release 0.x): the old paths warn.
MOVED = {
    f'{__name__}.{old}': f'{__name__}.{new}'
    for old, new in {
        'attention_figures': 'evidence.attention_figures',
        'attention_maps': 'evidence.attention_maps',
        'collapse': 'evidence.collapse',
        'entropy': 'evidence.entropy',
        'layers': 'evidence.layers',
        'measures': 'evidence.measures',
        'recorder': 'evidence.recorder',
        'robustness.apgd': 'robustness.attacks.apgd',
        'robustness.arm_means': 'robustness.verdicts.arm_means',
        'robustness.arms': 'robustness.verdicts.arms',
        'robustness.arms_report': 'robustness.reports.arms',
        'robustness.attack_report': 'robustness.reports.attacks',
        'robustness.attack_verdicts': 'robustness.verdicts.attacks',
        'robustness.audit': 'robustness.verdicts.audit',
        'robustness.bootstrap': 'robustness.verdicts.bootstrap',
        'robustness.class_weights': 'robustness.attacks.class_weights',
        'robustness.corruption_figure': 'robustness.reports.corruption_figure',
        'robustness.corruption_report': 'robustness.reports.corruptions',
        'robustness.corruption_verdicts': 'robustness.verdicts.corruptions',
        'robustness.elliptical': 'robustness.attacks.elliptical',
        'robustness.loop': 'robustness.grid.loop',
        'robustness.losses': 'robustness.attacks.losses',
        'robustness.paired': 'robustness.verdicts.paired',
        'robustness.pipeline': 'robustness.grid.pipeline',
        'robustness.protocols': 'robustness.grid.protocols',
        'robustness.square': 'robustness.attacks.square',
        'robustness.store': 'robustness.grid.store',
        'robustness.summary': 'robustness.verdicts.summary',
        'robustness.transfer': 'robustness.attacks.transfer',
        'robustness.worst': 'robustness.verdicts.worst',
        'tokens': 'evidence.tokens',
    }.items()
}
alias_moved(MOVED)

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
