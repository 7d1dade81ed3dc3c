"""mmseg's MAE backbone with elliptical attention."""
from mmseg.models.backbones import MAE
from mmseg.models.backbones.mae import MAETransformerEncoderLayer
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version
from .beit import EllipticalBEiT


@register_elliptical_version(MAETransformerEncoderLayer)
class EllipticalMAELayer(EllipticalLayerMixin, MAETransformerEncoderLayer):
    """MAE's encoder layer in a chain."""


@MODELS.register_module()
@register_elliptical_version(MAE)
class EllipticalMAE(EllipticalBEiT, MAE):
    """mmseg's ``MAE`` backbone with elliptical attention, as
    :class:`EllipticalBEiT`."""
