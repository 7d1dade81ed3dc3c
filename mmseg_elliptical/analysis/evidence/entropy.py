"""Mean attention entropy per layer over a few batches."""
from typing import Iterable, List, Optional

import torch
import torch.nn as nn

from .layers import TransformerLayers
from .measures import attention_entropy
from .recorder import LayerRecorder


@torch.no_grad()
def layer_entropy(model: nn.Module, found: TransformerLayers,
                  batches: Iterable) -> List[Optional[float]]:
    """Mean entropy (nats) of every layer's attention rows over
    ``model.test_step`` on ``batches``.

    Args:
        model (nn.Module): The segmentor (unwrapped, in eval mode).
        found (TransformerLayers): Its layers, found with ``convert=True``
            (their attentions run their explicit path while recording).
        batches (Iterable): Dataloader batches.

    Returns:
        list[float or None]: Per layer, the mean over images, heads and
        queries (None for a layer that did not attend).
    """
    n = len(found.layers)
    total, count = [0.0] * n, [0] * n
    with LayerRecorder(found, tokens=False, probs=True, grids=False) as rec:
        for batch in batches:
            model.test_step(batch)
            for i, record in enumerate(rec.records):
                for probs in record.probs:
                    values = attention_entropy(probs)
                    total[i] += values.sum().item()
                    count[i] += len(values)
            rec.clear()
    return [t / c if c else None for t, c in zip(total, count)]
