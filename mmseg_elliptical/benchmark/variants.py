"""The benchmarked models: variants derived from a config (:data:`ROLES`,
docs/benchmark.md), built and stepped."""
import copy
import dataclasses
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn
from mmengine.config import ConfigDict
from mmengine.logging import print_log
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import DefaultScope
from mmseg.models.backbones import __all__ as backbones
from mmseg.models.decode_heads import Mask2FormerHead, MaskFormerHead
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from mmseg.utils import register_all_modules

from ..models import (EllipticalAttentionMixin, EllipticalTransformerMixin,
                      adaptive_relevance, elliptical_version)
from ..models.conversion import ELLIPTICAL_VERSIONS
from ..models.transformer import PARTS
from ..utils import load_config, model_names
from ..utils.choices import DEFAULT_ROLES, ROLES  # noqa: F401 (--roles)
from ..utils.registry import model_class
from .apgd_step import APGD_MODE, apgd_step

#: The attack steps: forward and backward to the input, plain or through m.
ATTACK_MODES = ('attack', 'attack-adaptive')
MODES = ('infer', 'train') + ATTACK_MODES + (APGD_MODE, )


@dataclass
class BenchModel:
    """How to build one benchmarked model; picklable for child processes.

    Attributes:
        name (str): Display name.
        family (str): Name of the config it comes from.
        role (str): One of :data:`ROLES`, or ``'model'`` (measured as given).
        config (str): The config file.
        model_cfg (dict): The ``model`` config of this variant.
        whole_model (bool): Benchmark the segmentor, not the backbone.
        explicit_attention (bool): Run the attentions' explicit path.
    """
    name: str
    family: str
    role: str
    config: str
    model_cfg: dict
    whole_model: bool = False
    explicit_attention: bool = False


def _registry():
    register_all_modules(init_default_scope=False)
    return MODELS


def _type_of(cls: type):
    """The name ``cls`` is registered under in mmseg's MODELS, else itself."""
    for name, registered in _registry().module_dict.items():
        if registered is cls:
            return name
    return cls


def _transformer_version(type_) -> Optional[type]:
    """The elliptical backbone or head class of a config ``type``, or None."""
    cls = model_class(type_)
    if not isinstance(cls, type):
        return None
    return elliptical_version(cls, EllipticalTransformerMixin)


def supported_backbones() -> List[str]:
    """Names of the mmseg backbones the plugin has an elliptical version of."""
    return sorted(
        src.__name__ for src in ELLIPTICAL_VERSIONS
        if _transformer_version(src) is not None and src.__name__ in backbones)


def derive_variants(family: str,
                    config: str,
                    model_cfg: dict,
                    roles: Sequence[str] = DEFAULT_ROLES,
                    whole_model: bool = False) -> List[BenchModel]:
    """The variants of one config.

    Args:
        family (str): Name of the config.
        config (str): Config file.
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
    if _transformer_version(model_cfg['backbone']['type']) is None:
        return [
            BenchModel(family, family, 'model', config, model_cfg, whole_model)
        ]
    ell = copy.deepcopy(model_cfg)
    ell['backbone']['type'] = _type_of(
        _transformer_version(model_cfg['backbone']['type']))
    parts = [
        p for p in PARTS
        if isinstance(ell.get(p), dict) and ell[p].get('type') is not None
        and _transformer_version(ell[p]['type']) is model_class(ell[p]['type'])
    ]
    variants = dict(elliptical=ell, **{'paper-ref': ell})
    variants['fused-dot'] = copy.deepcopy(ell)
    variants['mmseg-dot'] = copy.deepcopy(ell)
    for part in parts:
        cls = model_class(ell[part]['type'])
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


def config_variants(configs: Sequence[str],
                    names: Optional[Sequence[str]] = None,
                    roles: Sequence[str] = DEFAULT_ROLES,
                    whole_model: bool = False,
                    cfg_options: Optional[dict] = None) -> List[BenchModel]:
    """The variants (:func:`derive_variants`) of every config, with random
    weights.

    Args:
        configs (Sequence[str]): Config files.
        names (Sequence[str], optional): One name per config; defaults to
            the file names.
        roles (Sequence[str]): Variants wanted, among :data:`ROLES`.
        whole_model (bool): Benchmark the segmentors, not the backbones.
        cfg_options (dict, optional): Overrides of every config.

    Returns:
        list[BenchModel]: In config order; with several configs named
        ``CONFIG_NAME/ROLE``.
    """
    specs = []
    names = model_names(configs, names)
    for name, config in zip(names, configs):
        cfg = load_config(config, cfg_options, no_pretrained=True)
        variants = derive_variants(name, config, cfg.model.to_dict(), roles,
                                   whole_model)
        if variants[0].role == 'model':
            print_log(
                f'{name}: {cfg.model.backbone.type} has no elliptical '
                f'version (supported: {", ".join(supported_backbones())}); '
                'measured as it is.',
                logger='current')
        elif len(names) > 1:
            variants = [
                dataclasses.replace(v, name=f'{name}/{v.role}')
                for v in variants
            ]
        specs += variants
    return specs


class BenchForward(nn.Module):
    """What is timed, counted and exported of a model: the backbone's
    forward, or the segmentor's in ``mode='tensor'`` (mmdet's MaskFormer
    heads get data samples made from the input's shape).

    Args:
        model (nn.Module): A backbone, or a segmentor with ``whole_model``.
        whole_model (bool): ``model`` is a segmentor.
    """

    def __init__(self, model: nn.Module, whole_model: bool = False) -> None:
        super().__init__()
        self.model = model
        self.whole_model = whole_model
        self.head_needs_samples = whole_model and isinstance(
            getattr(model, 'decode_head', None),
            (MaskFormerHead, Mask2FormerHead))

    def forward(self, inputs: torch.Tensor):
        if not self.whole_model:
            return self.model(inputs)
        if not self.head_needs_samples:
            return self.model(inputs, mode='tensor')
        hw = tuple(inputs.shape[-2:])
        meta = dict(
            img_shape=hw, pad_shape=hw, batch_input_shape=hw, ori_shape=hw)
        samples = [SegDataSample(metainfo=meta) for _ in range(len(inputs))]
        segmentor = self.model
        return segmentor.decode_head(segmentor.extract_feat(inputs), samples)


def build_model(spec: BenchModel,
                device: str = 'cpu',
                seed: int = 0) -> BenchForward:
    """Build the benchmarked module in eval mode, SyncBN as BN; variants
    built with the same seed get the same weights.

    Args:
        spec (BenchModel): The model.
        device (str): Device.
        seed (int): Seed of the initial weights.
    """
    models = _registry()
    torch.manual_seed(seed)
    with DefaultScope.overwrite_default_scope('mmseg'):
        segmentor = models.build(ConfigDict(copy.deepcopy(spec.model_cfg)))
    segmentor = revert_sync_batchnorm(segmentor)
    model = BenchForward(segmentor if spec.whole_model else segmentor.backbone,
                         spec.whole_model)
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
    return model.to(device).eval()


def output_sum(out) -> torch.Tensor:
    """Sum of every tensor of a (nested) model output, as a scalar loss."""
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    return sum(output_sum(o) for o in out)


def make_step(model: BenchForward,
              x: torch.Tensor,
              mode: str,
              amp: bool = False,
              runner: Optional[Callable] = None,
              apgd_steps: int = 10) -> Callable:
    """A callable running one step of ``mode`` (and setting the model's
    mode).

    Args:
        model (BenchForward): The module.
        x (Tensor): Input batch.
        mode (str): ``'infer'`` (``no_grad``), ``'train'`` (forward and
            backward of the output sum, no optimizer), ``'attack'`` (eval
            mode, the gradient of the output sum w.r.t. the input only: one
            step of an attack) or ``'attack-adaptive'`` (the same inside
            :func:`~mmseg_elliptical.models.adaptive_relevance`) or
            ``'attack-apgd'`` (eval mode, a run of the grid's APGD-MCE:
            :func:`.apgd_step.apgd_step`).
        amp (bool): bf16 autocast on ``x``'s device.
        runner (callable, optional): What runs the forward, e.g. the
            compiled model; defaults to ``model``.
        apgd_steps (int): APGD's iterations (``'attack-apgd'``).

    Returns:
        callable: The step; an attack step returns the input's gradient.
    """
    if mode not in MODES:
        raise ValueError(f'mode={mode!r} must be one of {MODES}.')
    runner = model if runner is None else runner
    autocast = torch.autocast(x.device.type, torch.bfloat16, enabled=amp)
    model.train(mode == 'train')
    if mode == APGD_MODE:
        return apgd_step(runner, x, apgd_steps, autocast)

    def infer() -> None:
        with torch.no_grad(), autocast:
            runner(x)

    def train() -> None:
        model.zero_grad(set_to_none=True)
        with autocast:
            loss = output_sum(runner(x))
        loss.backward()

    image = x.detach().requires_grad_(True)

    def attack() -> torch.Tensor:
        with torch.enable_grad(), adaptive_relevance(
                model, mode == 'attack-adaptive'), autocast:
            loss = output_sum(runner(image))
        return torch.autograd.grad(loss, image)[0]

    return dict(infer=infer, train=train).get(mode, attack)
