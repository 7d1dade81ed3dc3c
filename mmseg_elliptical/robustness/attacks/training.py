"""Adversarial training's attack (what ``AdversarialTrainingHook`` runs
before each step and the benchmark times): the grid's own attacks on the
training-time forward, against the batch's own labels; APGD as SEA's
training attack (:class:`TrainingAttack`)."""
import copy
import zlib
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import (Callable, ClassVar, Dict, Iterator, List, Optional,
                    Sequence, Tuple)

import torch
import torch.nn.functional as F
from mmengine.optim import AmpOptimWrapper
from mmengine.runner import autocast
from mmseg.models import SegDataPreProcessor
from mmseg.models.decode_heads.decode_head import BaseDecodeHead
from torch import Tensor

from ...errors import AnalysisError, ConfigError
from ...utils.state import kept_modes, kept_rng
from . import pgd as attacks
from .eps import parse_eps
from .keys import image_key
from .losses import BALANCED

#: The attack of each name the hook can train against: one implementation
#: of each attack serves the grid and training (``perturb`` hands APGD's
#: names to :func:`..robustness.apgd.apgd`, in its training mode
#: for a :class:`TrainingAttack`).
CRAFTERS: Dict[str, Callable] = {
    name: attacks.perturb
    for name in attacks.ATTACKS
}
#: The message hub's key of the attack's success (pixel accuracy, percent,
#: on the attacked images before the step), logged beside the loss.
ACCURACY_KEY = 'train/adv_pixel_acc'


@dataclass(frozen=True)
class TrainingAttack(attacks.Attack):
    """An :class:`~.pgd.Attack` whose APGD is SEA's training attack
    (:mod:`.apgd`); other attacks as on the grid."""
    train: ClassVar[bool] = True


def _fail(problem: str) -> None:
    raise ConfigError(f'AdversarialTrainingHook: {problem.rstrip(".")}.')


def draw(key: str, seed: int) -> float:
    """A uniform number in [0, 1) seeded by ``key`` and ``seed`` alone."""
    gen = torch.Generator().manual_seed(
        (zlib.crc32(key.encode()) + seed) % 2**63)
    return float(torch.rand((), generator=gen))


def check_model(model) -> None:
    """Raise :class:`ConfigError` for a segmentor the hook cannot attack:
    no mmseg data preprocessor normalising 0-255 images (the attack's
    unit), batch augments (they would be drawn again), or no decode head
    whose forward gives the logits."""
    pre = getattr(model, 'data_preprocessor', None)
    mean = getattr(pre, 'mean', None) if isinstance(
        pre, SegDataPreProcessor) else None
    if mean is None or not getattr(pre, '_enable_normalize', False) \
            or float(mean.max()) <= 1:
        _fail(
            f'the model needs an mmseg SegDataPreProcessor that '
            f'normalises 0-255 images (mean/std in levels, e.g. mean='
            f'[123.675, 116.28, 103.53]); it has {type(pre).__name__}'
            f'{"" if mean is None else f" with mean {mean.flatten().tolist()}"}'  # noqa: E501
            '. Set model.data_preprocessor so (the eps is in 0-255 levels)')
    if pre.batch_augments is not None:
        _fail('the data preprocessor has batch_augments, which would be '
              'drawn again for the attack: remove them')
    head = getattr(model, 'decode_head', None)
    if not isinstance(head, BaseDecodeHead) or not hasattr(
            model, 'extract_feat'):
        _fail(f'the model ({type(model).__name__}) needs one mmseg decode '
              f'head (a BaseDecodeHead) whose forward gives the logits; it '
              f'has {type(head).__name__}')


def training_forward(model, images: Sequence[Tensor],
                     samples: Sequence) -> Tuple[Callable, List[Tensor]]:
    """The training-time logits of a batch, as a function of its images,
    and the labels the decode head's loss compares them with.

    The data preprocessor runs its training path (normalisation, padding of
    images and labels to its ``size``) on copies of ``samples``; the logits
    are ``decode_head.forward(extract_feat(...))`` resized to the labels'
    size with the head's ``align_corners``, as its ``loss_by_feat`` does.

    Args:
        model: The segmentor (not a wrapper).
        images (Sequence[Tensor]): The batch's ``[3, H, W]`` 0-255 images.
        samples (Sequence[SegDataSample]): The batch's data samples, with
            ``gt_sem_seg``.

    Returns:
        tuple: ``forward`` (list of ``[3, H, W]`` 0-255 images to a list of
        ``[C, h, w]`` logits) and the ``[h, w]`` long labels.
    """
    if not all('gt_sem_seg' in s for s in samples):
        _fail('the training batch has no gt_sem_seg to attack with: keep '
              'LoadAnnotations in the train pipeline')
    head = model.decode_head

    def preprocess(xs) -> Dict:
        return model.data_preprocessor(
            dict(inputs=list(xs), data_samples=copy.deepcopy(samples)), True)

    def forward(xs) -> List[Tensor]:
        data = preprocess(xs)
        logits = head.forward(model.extract_feat(data['inputs']))
        size = data['data_samples'][0].gt_sem_seg.shape
        logits = F.interpolate(
            logits,
            size=size,
            mode='bilinear',
            align_corners=head.align_corners)
        return list(logits)

    with torch.no_grad():
        data = preprocess(images)
    labels = [s.gt_sem_seg.data[0].long() for s in data['data_samples']]
    return forward, labels


@contextmanager
def attacking(model) -> Iterator[None]:
    """Eval mode (norm layers frozen, no dropout), no parameter requiring a
    gradient, and every random state kept; each module's mode and each
    parameter's flag given back on exit."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    with kept_rng(), kept_modes(model):
        try:
            for p, _ in flags:
                p.requires_grad_(False)
            yield
        finally:
            for p, flag in flags:
                p.requires_grad_(flag)


def pixel_accuracy(logits: Sequence[Tensor], labels: Sequence[Tensor],
                   ignore_index: int) -> float:
    """Percent of the labelled pixels whose argmax is their label."""
    right = total = 0
    for lg, lb in zip(logits, labels):
        valid = lb != ignore_index
        right += int(((lg.argmax(0) == lb) & valid).sum())
        total += int(valid.sum())
    return 100. * right / max(total, 1)


class TrainingAttacker:
    """Replaces the chosen images of training batches by adversarial ones;
    the arguments are ``AdversarialTrainingHook``'s (its docstring)."""

    def __init__(self,
                 attack: Dict,
                 ratio: float = 1.,
                 adaptive: bool = False,
                 seed: int = 0,
                 allow_small_eps: bool = False,
                 log_accuracy: bool = True) -> None:
        if not isinstance(attack, dict):
            _fail(f'attack={attack!r} must be a dict of the attack\'s '
                  'fields (name, norm, eps, steps, step_size)')
        fields = dict(attack)
        for key in ('labels', 'seed', 'adaptive'):
            if key in fields:
                _fail(f'attack has {key}=, which the hook sets (labels: the '
                      'ground truth; give seed= and adaptive= to the hook)')
        name = fields.get('name')
        if name not in CRAFTERS:
            _fail(f'unknown attack {name!r}: one of {sorted(CRAFTERS)}')
        if name in attacks.APGD_ATTACKS:  # its own step, as on the grid
            fields.setdefault('step_size', 2.)
        if name in BALANCED and fields.get('class_weights') is None:
            _fail(f'{name} weights classes by the training set\'s pixel '
                  'counts, which the hook does not count: give '
                  'attack.class_weights (one per class, e.g. the "weights" '
                  'of the grid\'s class_weights.json), or train against '
                  'apgd-ce, apgd-mce or apgd-js')
        norm = fields.get('norm', 'linf')
        if norm not in attacks.NORMS:
            _fail(f'norm {norm!r} is none of {attacks.NORMS}')
        try:
            fields['eps'] = parse_eps(
                fields.get('eps'), norm, allow_small=allow_small_eps)
            if isinstance(fields.get('step_size'), str):  # '2/255'
                fields['step_size'] = parse_eps(fields['step_size'], norm,
                                                True)
        except ConfigError as err:
            _fail(f'attack eps: {err}')
        if not fields['eps'] > 0:
            _fail('eps=0 attacks nothing: give eps > 0, or ratio=0 for '
                  'plain training')
        steps = fields.get('steps', 1)
        if isinstance(steps, bool) or not isinstance(steps, int) or not \
                1 <= steps <= 1000:
            _fail(f'steps={steps!r} must be an integer in [1, 1000]')
        number = isinstance(ratio,
                            (int, float)) and not isinstance(ratio, bool)
        if not number or not 0 <= ratio <= 1:
            _fail(f'ratio={ratio!r} must be a number in [0, 1] (the '
                  'fraction of each batch attacked)')
        if isinstance(seed, bool) or not isinstance(seed, int):
            _fail(f'seed={seed!r} must be an integer')
        try:
            self.attack = TrainingAttack(
                **dict(fields, norm=norm, adaptive=bool(adaptive), seed=seed))
        except (AnalysisError, TypeError) as err:
            _fail(f'attack={attack!r}: {err}')
        self.ratio = float(ratio)
        self.seed = seed
        self.log_accuracy = log_accuracy
        self.data_root: Optional[str] = None  # the train data's, when known

    def chosen(self, keys: Sequence[str], iteration: int) -> List[int]:
        """The indices of the batch's images attacked at ``iteration``."""
        if self.ratio >= 1:
            return list(range(len(keys)))
        return [
            i for i, key in enumerate(keys)
            if draw(f'choice/{key}@{iteration}', self.seed) < self.ratio
        ]

    def attack_batch(self,
                     model,
                     data_batch: Optional[dict],
                     batch_idx: int,
                     iteration: int,
                     wrapper=None) -> Optional[float]:
        """Replace the chosen images of ``data_batch`` (its ``inputs``
        changed in place) by adversarial ones crafted on ``model`` (not a
        wrapper) at training ``iteration``, under ``wrapper``'s autocast
        when it is an ``AmpOptimWrapper``.

        Returns:
            float, optional: The pixel accuracy on the attacked images
            (``log_accuracy``), or None.
        """
        if data_batch is None or self.ratio == 0:
            return None
        samples = data_batch['data_samples']
        keys = [
            image_key(
                str(s.metainfo.get('img_path', f'{batch_idx}/{i}')),
                self.data_root) for i, s in enumerate(samples)
        ]
        picked = self.chosen(keys, iteration)
        if not picked:
            return None
        images = [data_batch['inputs'][i] for i in picked]
        sub = [samples[i] for i in picked]
        cast = autocast(dtype=wrapper.cast_dtype) if isinstance(
            wrapper, AmpOptimWrapper) else nullcontext()
        ignore = model.decode_head.ignore_index
        with attacking(model), cast:
            forward, labels = training_forward(model, images, sub)
            xs = CRAFTERS[self.attack.name](
                model,
                images,
                sub,
                self.attack,
                ignore,
                forward=forward,
                labels=labels,
                start_keys=[f'{keys[i]}@{iteration}' for i in picked])
            accuracy = None
            if self.log_accuracy:
                with torch.no_grad():
                    accuracy = pixel_accuracy(forward(xs), labels, ignore)
        inputs = data_batch['inputs']
        if isinstance(inputs, Tensor):  # a stacked batch: a float copy
            inputs = data_batch['inputs'] = inputs.float()
        for i, x in zip(picked, xs):
            inputs[i] = x.to(images[0].device)
        return accuracy
