"""The benchmarked models: variants derived from a config, built and stepped.

For a config whose backbone is one of the plugin's elliptical backbones, or
mmseg's class of one (any registered in
:data:`~mmseg_elliptical.models.conversion.ELLIPTICAL_VERSIONS`), the
variants are derived from the config alone:

* ``elliptical``: the elliptical backbone (mmseg's type swapped for its
  elliptical version when the config has mmseg's);
* ``fused-dot``: the same with ``elliptical_layers=[]``: the same code, fused
  dot-product attention (the fair baseline of the elliptical overhead);
* ``mmseg-dot``: mmseg's own class, the plugin's arguments removed;
* ``paper-ref``: ``elliptical`` on the explicit path (``fused_attn=False``:
  the paper's formulation, materialised probabilities).

A decode head that is elliptical in the config gets the same treatment. A
config whose backbone has no elliptical version is measured as it is.

The segmentor (``whole_model``) runs as ``mode='tensor'`` does: the decode
head's raw outputs. mmdet's MaskFormer and Mask2Former heads need the data
samples for that, which :class:`TensorForward` makes from the input's shape.
"""
import copy
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn

ROLES = ('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref')
DEFAULT_ROLES = ('elliptical', 'fused-dot', 'mmseg-dot')
PARTS = ('backbone', 'decode_head')
MODES = ('infer', 'train')


@dataclass
class BenchModel:
    """How to build one benchmarked model; picklable for child processes.

    Attributes:
        name (str): Display name.
        family (str): Name of the config it comes from.
        role (str): One of :data:`ROLES`, or ``'model'`` (measured as given).
        config (str): The config file.
        model_cfg (dict): The ``model`` config of this variant.
        whole_model (bool): Benchmark the segmentor (``mode='tensor'``), not
            the backbone.
        explicit_attention (bool): Run every elliptical attention on its
            explicit path (``paper-ref``).
    """
    name: str
    family: str
    role: str
    config: str
    model_cfg: dict
    whole_model: bool = False
    explicit_attention: bool = False


def _registry():
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules

    import mmseg_elliptical  # noqa: F401  (registers the plugin)
    register_all_modules(init_default_scope=False)
    return MODELS


def _class_of(type_) -> Optional[type]:
    if isinstance(type_, type):
        return type_
    return _registry().get(type_)


def _type_of(cls: type):
    """The name ``cls`` is registered under in mmseg's MODELS, else itself
    (``MODELS.build`` accepts a class as ``type``)."""
    for name, registered in _registry().module_dict.items():
        if registered is cls:
            return name
    return cls


def elliptical_transformer(type_) -> Optional[type]:
    """The plugin's elliptical backbone or head class for a config type.

    Args:
        type_ (str or type): A config ``type``: an elliptical class of the
            plugin or an mmseg class that has one.

    Returns:
        type, optional: Its
        :func:`~mmseg_elliptical.models.conversion.elliptical_version` when
        that is an
        :class:`~mmseg_elliptical.models.transformer.EllipticalTransformerMixin`,
        else None.
    """
    from ..models import EllipticalTransformerMixin, elliptical_version
    cls = _class_of(type_)
    cls = None if not isinstance(cls, type) else elliptical_version(cls)
    if cls is not None and issubclass(cls, EllipticalTransformerMixin):
        return cls
    return None


def supported_backbones() -> List[str]:
    """Names of the mmseg backbones the plugin has an elliptical version of."""
    from mmseg.models.backbones import __all__ as backbones

    from ..models import EllipticalTransformerMixin
    from ..models.conversion import ELLIPTICAL_VERSIONS
    return sorted(src.__name__ for src, cls in ELLIPTICAL_VERSIONS.items()
                  if issubclass(cls, EllipticalTransformerMixin)
                  and src.__name__ in backbones)


def derive_variants(family: str,
                    config: str,
                    model_cfg: dict,
                    roles: Sequence[str] = DEFAULT_ROLES,
                    whole_model: bool = False) -> List[BenchModel]:
    """The variants of one config (see the module docstring).

    Args:
        family (str): Name of the config.
        config (str): Config file (for the report).
        model_cfg (dict): Its ``model`` config.
        roles (Sequence[str]): Variants wanted, among :data:`ROLES`.
        whole_model (bool): Benchmark the segmentor, not the backbone.

    Returns:
        list[BenchModel]: In the order of ``roles``; one ``'model'`` entry
        when the backbone has no elliptical version.
    """
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ValueError(f'Unknown roles {bad}; choose among {ROLES}.')
    model_cfg = copy.deepcopy(dict(model_cfg))
    if elliptical_transformer(model_cfg['backbone']['type']) is None:
        return [
            BenchModel(family, family, 'model', config, model_cfg, whole_model)
        ]
    ell = copy.deepcopy(model_cfg)
    ell['backbone']['type'] = _type_of(
        elliptical_transformer(model_cfg['backbone']['type']))
    # Parts that are elliptical in the subject: the backbone, and the decode
    # head where the config makes it elliptical.
    parts = [
        p for p in PARTS
        if isinstance(ell.get(p), dict) and ell[p].get('type') is not None
        and elliptical_transformer(ell[p]['type']) is _class_of(ell[p]['type'])
    ]
    variants = dict(elliptical=ell, **{'paper-ref': ell})
    variants['fused-dot'] = copy.deepcopy(ell)
    variants['mmseg-dot'] = copy.deepcopy(ell)
    for part in parts:
        cls = _class_of(ell[part]['type'])
        variants['fused-dot'][part]['elliptical_layers'] = []
        dot = variants['mmseg-dot'][part]
        dot['type'] = _type_of(cls.mmseg_class())
        for arg in cls.OWN_ARGS:
            dot.pop(arg, None)
    return [
        BenchModel(
            role,
            family,
            role,
            config,
            copy.deepcopy(variants[role]),
            whole_model,
            explicit_attention=role == 'paper-ref') for role in roles
    ]


class TensorForward(nn.Module):
    """A segmentor whose decode head's ``forward`` needs the data samples
    (mmdet's MaskFormer and Mask2Former heads), run as ``mode='tensor'``
    runs the others: the head's raw outputs on the backbone's features.

    Args:
        segmentor (nn.Module): The segmentor.
    """

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        self.segmentor = segmentor

    @staticmethod
    def needed(segmentor: nn.Module) -> bool:
        """Whether ``segmentor``'s decode head takes the samples."""
        from mmseg.models.decode_heads import Mask2FormerHead, MaskFormerHead
        return isinstance(
            getattr(segmentor, 'decode_head', None),
            (MaskFormerHead, Mask2FormerHead))

    def forward(self, inputs: torch.Tensor, mode: str = 'tensor'):
        from mmseg.structures import SegDataSample
        hw = tuple(inputs.shape[-2:])
        meta = dict(
            img_shape=hw, pad_shape=hw, batch_input_shape=hw, ori_shape=hw)
        samples = [SegDataSample(metainfo=meta) for _ in range(len(inputs))]
        segmentor = self.segmentor
        return segmentor.decode_head(segmentor.extract_feat(inputs), samples)


def build_model(spec: BenchModel,
                device: str = 'cpu',
                seed: int = 0) -> nn.Module:
    """Build the benchmarked module (backbone or segmentor), in eval mode.

    Every variant built with the same seed gets the same weights (the
    elliptical classes build mmseg's model and convert it in place).
    SyncBN becomes BN (mmengine's ``revert_sync_batchnorm``).

    Args:
        spec (BenchModel): The model.
        device (str): Device. Defaults to ``'cpu'``.
        seed (int): Seed of the initial weights. Defaults to 0.

    Returns:
        nn.Module: The module.
    """
    from mmengine.config import ConfigDict
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope

    from ..models import EllipticalAttentionMixin
    models = _registry()
    torch.manual_seed(seed)
    with DefaultScope.overwrite_default_scope('mmseg'):
        segmentor = models.build(ConfigDict(copy.deepcopy(spec.model_cfg)))
    segmentor = revert_sync_batchnorm(segmentor)
    model = segmentor if spec.whole_model else segmentor.backbone
    if spec.whole_model and TensorForward.needed(segmentor):
        model = TensorForward(segmentor)
    if spec.explicit_attention:
        attentions = [
            m for m in model.modules()
            if isinstance(m, EllipticalAttentionMixin)
        ]
        if not attentions:
            raise ValueError(f'{spec.name}: no elliptical attention to put '
                             'on the explicit path.')
        for attn in attentions:
            attn.fused_attn = False
    model.to(device)
    model.eval()  # mmseg's ViT.train() returns None: no chaining
    return model


def run_forward(model: Callable, x: torch.Tensor, whole_model: bool):
    """Forward of a backbone, or of a segmentor in ``mode='tensor'``."""
    return model(x, mode='tensor') if whole_model else model(x)


def output_sum(out) -> torch.Tensor:
    """Sum of every tensor of a (nested) model output, as a scalar loss."""
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    return sum(output_sum(o) for o in out)


def make_step(model: nn.Module,
              x: torch.Tensor,
              mode: str,
              whole_model: bool = False,
              amp: bool = False,
              runner: Optional[Callable] = None) -> Callable[[], None]:
    """A callable running one inference or one training step.

    Sets the model's mode (eval for ``'infer'``, train for ``'train'``).

    Args:
        model (nn.Module): The module.
        x (Tensor): Input batch.
        mode (str): ``'infer'``: forward under ``no_grad``. ``'train'``:
            forward and backward of the output sum (no optimizer: the models
            compared have the same parameters); gradients are reset first.
        whole_model (bool): Whether ``model`` is a segmentor.
        amp (bool): bf16 autocast on ``x``'s device.
        runner (callable, optional): What runs the forward, e.g. the
            ``torch.compile`` d model; defaults to ``model``.

    Returns:
        Callable[[], None]: The step.
    """
    if mode not in MODES:
        raise ValueError(f'mode={mode!r} must be one of {MODES}.')
    runner = model if runner is None else runner
    autocast = torch.autocast(x.device.type, torch.bfloat16, enabled=amp)
    model.train(mode == 'train')

    def infer() -> None:
        with torch.no_grad(), autocast:
            run_forward(runner, x, whole_model)

    def train() -> None:
        model.zero_grad(set_to_none=True)
        with autocast:
            loss = output_sum(run_forward(runner, x, whole_model))
        loss.backward()

    return infer if mode == 'infer' else train
