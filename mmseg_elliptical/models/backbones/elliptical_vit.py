"""mmseg's VisionTransformer with elliptical attention."""
from typing import Optional, Sequence

import torch
from torch import Tensor

from mmseg.models.backbones import VisionTransformer
from mmseg.registry import MODELS
from ..utils import forward_layer, make_elliptical


@MODELS.register_module()
class EllipticalVisionTransformer(VisionTransformer):
    """Vision Transformer whose layers use elliptical attention.

    Accepts every argument of mmseg's ``VisionTransformer`` (forwarded
    unchanged) and has the same parameters and state-dict keys, so mmseg ViT
    checkpoints load in both directions. With ``elliptical_layers=[]`` it
    computes what ``VisionTransformer`` computes.

    Args:
        elliptical_layers (Sequence[int], optional): Layers that score
            elliptically. Layer 0 has no previous values and is always
            dot-product. Defaults to None: layers ``1 .. num_layers - 1``.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``
            over tokens of ``|v^l - v^(l-1)|``. Defaults to ``'mean'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
            Defaults to 1e-6.
        **kwargs: Arguments of ``mmseg.models.backbones.VisionTransformer``.
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

    def _to_output(self, x: Tensor, hw_shape) -> object:
        """Tokens ``[B, N, C]`` to mmseg's output (feature map [+ cls])."""
        out = x[:, 1:] if self.with_cls_token else x
        B, _, C = out.shape
        out = out.reshape(B, hw_shape[0], hw_shape[1],
                          C).permute(0, 3, 1, 2).contiguous()
        return [out, x[:, 0]] if self.output_cls_token else out

    def forward(self, inputs: Tensor) -> tuple:
        """Same as ``VisionTransformer.forward``, values threaded."""
        if inputs.dim() != 4 or not inputs.is_floating_point():
            raise ValueError(
                f'{type(self).__name__} expects a float batch of images '
                f'[B, C, H, W], got shape {tuple(inputs.shape)} and dtype '
                f'{inputs.dtype} (images are normalised to float by the '
                'data preprocessor).')
        x, hw_shape = self.patch_embed(inputs)
        cls_tokens = self.cls_token.expand(inputs.shape[0], -1, -1)
        x = self._pos_embeding(
            torch.cat((cls_tokens, x), dim=1), hw_shape, self.pos_embed)
        if not self.with_cls_token:
            x = x[:, 1:]
        if self.pre_norm:
            x = self.pre_ln(x)

        outs = [self._to_output(x, hw_shape)] if self.out_origin else []
        v = None
        for i, layer in enumerate(self.layers):
            x, v = forward_layer(layer, x, v)
            if i == len(self.layers) - 1 and self.final_norm:
                x = self.norm1(x)
            if i in self.out_indices:
                outs.append(self._to_output(x, hw_shape))
        return tuple(outs)

    def train(self, mode: bool = True) -> 'EllipticalVisionTransformer':
        """Set train/eval mode (honouring ``norm_eval``) and return self."""
        super().train(mode)
        return self
