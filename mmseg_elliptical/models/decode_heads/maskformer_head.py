"""mmseg's MaskFormer head with elliptical query self-attention."""
from mmseg.models.decode_heads import MaskFormerHead
from mmseg.registry import MODELS

from ..conversion import register_elliptical_version
from .query_decoder import EllipticalQueryDecoderMixin


@MODELS.register_module()
@register_elliptical_version(MaskFormerHead)
class EllipticalMaskFormerHead(EllipticalQueryDecoderMixin, MaskFormerHead):
    """mmseg's ``MaskFormerHead`` whose decoder scores its query
    self-attention elliptically.

    MaskFormer's decoder (mmdet's ``DetrTransformerDecoder``) is the same
    mechanism as Mask2Former's: each layer runs a self-attention over the same
    ``num_queries`` queries ``[B, Q, C]`` (then a cross-attention to the
    pixel decoder's last feature map, then the FFN), so decoder layer l >= 1
    scores its query self-attention with ``m`` from its values and those of
    decoder layer l - 1, per image and head over the queries. The queries
    enter layer 0 as zeros (only their positions differ), so layer 0's
    values are the same for every query; layer 1 compares with them like
    any other. The cross-attention stays dot-product. Needs mmdet (the
    ``mmdet`` extra).

    Same arguments, parameters and state-dict keys as mmseg's head
    (checkpoints load strictly both ways); with ``elliptical_layers=[]`` it
    computes what that head computes.

    Args:
        elliptical_layers (Sequence[int], optional): Decoder layers that
            score elliptically. Defaults to None: layers
            ``1 .. num_layers - 1`` (1..5 of the ADE20K configs' 6).
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``MaskFormerHead``.
    """
