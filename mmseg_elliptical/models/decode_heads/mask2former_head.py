"""mmseg's Mask2Former head with elliptical query self-attention."""
from mmseg.models.decode_heads import Mask2FormerHead
from mmseg.registry import MODELS

from ..conversion import register_elliptical_version
from .query_decoder import EllipticalQueryDecoderMixin


@MODELS.register_module()
@register_elliptical_version(Mask2FormerHead)
class EllipticalMask2FormerHead(EllipticalQueryDecoderMixin, Mask2FormerHead):
    """mmseg's ``Mask2FormerHead`` whose decoder scores its query
    self-attention elliptically.

    Each of the decoder's layers (mmdet's
    ``Mask2FormerTransformerDecoderLayer``: masked cross-attention to one
    level of the pixel decoder's features, then self-attention over the
    queries, then the FFN) attends over the same ``num_queries`` queries
    ``[B, Q, C]``; decoder layer l >= 1 scores its query self-attention with
    ``m`` from its values and those of decoder layer l - 1, per image and
    head over the queries. The masked cross-attention stays dot-product: its
    keys are pixel features of another level (resolution, token count and
    scale) in each consecutive layer, so no previous layer's values of the
    same tokens exist. Needs mmdet (the ``mmdet`` extra).

    Same arguments, parameters and state-dict keys as mmseg's head
    (checkpoints load strictly both ways); with ``elliptical_layers=[]`` it
    computes what that head computes.

    Args:
        elliptical_layers (Sequence[int], optional): Decoder layers that
            score elliptically. Defaults to None: layers
            ``1 .. num_layers - 1`` (1..8 of the ADE20K configs' 9).
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``Mask2FormerHead``.
    """
