"""mmseg's Segmenter mask-transformer head with elliptical attention."""
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mmseg.models.decode_heads import SegmenterMaskTransformerHead
from mmseg.registry import MODELS
from ..utils import forward_layer, make_elliptical


@MODELS.register_module()
class EllipticalMaskTransformerHead(SegmenterMaskTransformerHead):
    """Segmenter mask transformer whose layers use elliptical attention.

    Same arguments, parameters and state-dict keys as mmseg's
    ``SegmenterMaskTransformerHead``; with ``elliptical_layers=[]`` it computes
    what that head computes. The head's layers attend over patch tokens and
    class embeddings together; its layer 0 is dot-product (the backbone's
    values cover other tokens).

    Args:
        elliptical_layers (Sequence[int], optional): Head layers that score
            elliptically. Defaults to None: layers ``1 .. num_layers - 1``.
        relevance_reduction (str): ``'mean'`` or ``'median'``.
            Defaults to ``'mean'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
            Defaults to 1e-6.
        **kwargs: Arguments of ``SegmenterMaskTransformerHead``.
    """

    def __init__(self,
                 elliptical_layers: Optional[Sequence[int]] = None,
                 relevance_reduction: str = 'mean',
                 relevance_eps: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.elliptical_layers = make_elliptical(
            self.layers, elliptical_layers, relevance_reduction,
            relevance_eps, type(self).__name__)

    def forward(self, inputs: List[Tensor]) -> Tensor:
        """Same as ``SegmenterMaskTransformerHead.forward``, values threaded."""
        x = self._transform_inputs(inputs)
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f'{type(self).__name__}: in_channels={self.in_channels} but '
                f'the input feature map has shape {tuple(x.shape)}; set '
                'decode_head.in_channels to the backbone\'s embed_dims.')
        b, c, h, w = x.shape
        x = self.dec_proj(x.permute(0, 2, 3, 1).reshape(b, -1, c))
        x = torch.cat((x, self.cls_emb.expand(b, -1, -1)), 1)
        v = None
        for layer in self.layers:
            x, v = forward_layer(layer, x, v)
        x = self.decoder_norm(x)

        patches = F.normalize(self.patch_proj(x[:, :-self.num_classes]), dim=2)
        cls_seg_feat = F.normalize(
            self.classes_proj(x[:, -self.num_classes:]), dim=2)
        masks = self.mask_norm(patches @ cls_seg_feat.transpose(1, 2))
        return masks.permute(0, 2, 1).reshape(b, -1, h, w)
