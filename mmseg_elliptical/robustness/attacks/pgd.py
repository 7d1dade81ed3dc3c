"""White-box attacks on a segmentor: PGD, FGSM, SegPGD, CosPGD and APGD.

The attacked function is the whole of mmseg's inference from the 0-255
images the data preprocessor receives: normalisation, padding, whole or
slide inference and the resize of the logits to the label's size. The loss
of an image is the mean, over its pixels whose label is not ignored, of the
per-pixel cross-entropy, weighted per pixel by SegPGD (Gu et al., ECCV 2022)
or CosPGD (Agnihotri et al., ICML 2024). docs/evidence.md gives the
definitions and why ``cospgd``'s own functions are not used; APGD with
SEA's losses runs in :mod:`.apgd`.
"""
import zlib
from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmengine.dist import all_reduce
from mmengine.model import is_model_wrapper
from mmengine.runner import TestLoop, autocast
from mmseg.registry import LOOPS
from torch import Tensor

from ...errors import AnalysisError
from ...models.attention import adaptive_relevance
from . import cells as cells
from .apgd import apgd_images
from .cells import APGD_ATTACKS, Attack
from .keys import sample_keys
from .remedies import bpda_logits, eot_forward, eot_labels, is_random
from .square import square_perturb

# The names of utils/attack_cells.py (the tools' checks) kept here too.
PGD_ATTACKS, ATTACKS = cells.PGD_ATTACKS, cells.ATTACKS
NORMS, LABELS, check_attack = cells.NORMS, cells.LABELS, cells.check_attack
#: Pixels per unit of eps and step: L-inf in 0-255 levels, L2 on 0-1.
UNIT = dict(linf=1., l2=255.)
#: The query attacks (:data:`.cells.QUERY_ATTACKS`), each run by its module.
QUERY: Dict[str, Callable] = dict(square=square_perturb)


def pixel_weights(attack: Attack, logits: Tensor, labels: Tensor,
                  step: int) -> Optional[Tensor]:
    """The per-pixel loss weights of SegPGD and CosPGD (detached), or None.

    Args:
        attack (Attack): The attack.
        logits (Tensor): ``[C, H, W]``.
        labels (Tensor): ``[H, W]``, ignored pixels already replaced by a
            valid class.
        step (int): ``t`` in ``0 .. steps - 1``.
    """
    logits = logits.detach()
    if attack.name == 'segpgd':
        lam = step / (2 * attack.steps)
        right = logits.argmax(0) == labels
        return torch.where(right, 1 - lam, lam).to(logits.dtype)
    if attack.name == 'cospgd':
        probs = logits.softmax(0)
        picked = probs.gather(0, labels[None])[0]
        return picked / probs.norm(dim=0)  # cos(softmax, one-hot)
    return None


def image_loss(attack: Attack, logits: Tensor, labels: Tensor,
               ignore_index: int, step: int) -> Tensor:
    """Mean (weighted) cross-entropy over one image's labelled pixels."""
    valid = labels != ignore_index
    target = torch.where(valid, labels, 0)
    ce = F.cross_entropy(logits[None], target[None], reduction='none')[0]
    weights = pixel_weights(attack, logits, target, step)
    if weights is not None:
        ce = ce * weights
    return (ce * valid).sum() / valid.sum().clamp_min(1)


def seg_logits(model, images: Sequence[Tensor], samples: List) -> List:
    """The segmentation logits ``[C, H, W]`` at each label's size, through
    the data preprocessor (normalisation, padding) and ``predict``."""
    data = model.data_preprocessor(
        dict(inputs=list(images), data_samples=samples), False)
    out = model.predict(data['inputs'], data['data_samples'])
    return [s.seg_logits.data for s in out]


def random_start(attack: Attack,
                 x: Tensor,
                 path: str,
                 eps: Optional[float] = None) -> Tensor:
    """A uniform point of the ball around ``x`` (radius ``eps``, default
    the attack's), seeded by the image."""
    seed = (zlib.crc32(str(path).encode()) + attack.seed) % 2**63
    gen = torch.Generator().manual_seed(seed)
    eps = (attack.eps if eps is None else eps) * UNIT[attack.norm]
    if attack.norm == 'linf':
        delta = torch.rand(x.shape, generator=gen) * 2 - 1
        delta = delta * eps
    else:
        direction = torch.randn(x.shape, generator=gen)
        radius = torch.rand((), generator=gen)**(1 / x.numel())
        delta = direction / direction.norm() * radius * eps
    return (x + delta.to(x)).clamp(0, 255)


def step(attack: Attack, x: Tensor, grad: Tensor, x0: Tensor) -> Tensor:
    """One ascent step, projected to the ball around ``x0`` and [0, 255]."""
    eps = attack.eps * UNIT[attack.norm]
    alpha = attack.step_size * UNIT[attack.norm]
    if attack.norm == 'linf':
        x = x + alpha * grad.sign()
        x = torch.min(torch.max(x, x0 - eps), x0 + eps)
    else:
        x = x + alpha * grad / grad.norm().clamp_min(1e-12)
        delta = x - x0
        delta = delta * (eps / delta.norm().clamp_min(1e-12)).clamp(max=1)
        x = x0 + delta
    return x.clamp(0, 255)


def attack_labels(attack: Attack, model, x0: List[Tensor],
                  samples: List) -> List[Tensor]:
    """The labels the loss uses: the ground truth or the clean prediction.
    """
    if attack.labels == 'prediction':
        with torch.no_grad():
            return [
                lg.argmax(0).long() for lg in seg_logits(model, x0, samples)
            ]
    if not all('gt_sem_seg' in s for s in samples):
        raise AnalysisError(
            'The test pipeline gives no ground truth (gt_sem_seg) to attack '
            'with: add LoadAnnotations to it, or use --labels prediction.')
    return [s.gt_sem_seg.data[0].long().to(x0[0].device) for s in samples]


def perturb(model,
            images: Sequence[Tensor],
            samples: List,
            attack: Attack,
            ignore_index: int = 255,
            forward: Optional[Callable[[List[Tensor]], List[Tensor]]] = None,
            labels: Optional[List[Tensor]] = None,
            start_keys: Optional[Sequence[str]] = None) -> List[Tensor]:
    """The adversarial images of a batch.

    Args:
        model: A segmentor in eval mode (not a wrapper).
        images (Sequence[Tensor]): ``[3, H, W]`` images in 0-255, as the
            data preprocessor receives them.
        samples (list[SegDataSample]): Their data samples.
        attack (Attack): The attack.
        ignore_index (int): Label of pixels without a class.
        forward (callable, optional): The attacked function: images to
            ``[C, H, W]`` logits at their labels' size. Default:
            :func:`seg_logits` (``predict``, as evaluated), through
            :func:`~.remedies.bpda_logits` with ``attack.bpda``, and over
            ``attack.eot`` draws (:func:`~.remedies.eot_forward`, the labels
            tiled to match) when it is random (:func:`~.remedies.is_random`).
        labels (list[Tensor], optional): ``[H, W]`` labels of ``forward``'s
            logits. Default: :func:`attack_labels`.
        start_keys (Sequence[str], optional): What seeds each image's random
            start. Default: its ``img_path``.

    Returns:
        list[Tensor]: The float images (float64 from float64 ones), within
        the ball and [0, 255].
    """
    device = next(model.parameters()).device
    # Integer and half images in float32, float64 ones kept (a model in
    # float64 is attacked in float64: the tests' oracle comparisons).
    x0 = [
        img.to(device, torch.promote_types(img.dtype, torch.float32))
        for img in images
    ]
    draws = 1
    if forward is None:
        forward = partial(
            bpda_logits if attack.bpda else seg_logits, model, samples=samples)
        if attack.eot > 1 and is_random(forward, x0):
            draws = attack.eot
            forward = eot_forward(forward, draws)
    if labels is None:
        labels = attack_labels(attack, model, x0, samples)
    labels = eot_labels(labels, draws)
    if start_keys is None:
        start_keys = [
            s.metainfo.get('img_path', i) for i, s in enumerate(samples)
        ]
    if attack.name in QUERY:  # given what they attack, resolved here
        return QUERY[attack.name](model, x0, samples, attack, ignore_index,
                                  forward, labels, start_keys)
    if attack.name in APGD_ATTACKS:
        return apgd_images(attack, model, forward, x0, labels, ignore_index,
                           partial(random_start, attack), start_keys,
                           UNIT[attack.norm])
    xs = x0
    if attack.random_start:
        xs = [random_start(attack, x, k) for x, k in zip(x0, start_keys)]
    for t in range(attack.steps):
        xs = [x.detach().requires_grad_(True) for x in xs]
        with torch.enable_grad(), adaptive_relevance(model, attack.adaptive):
            logits = forward(xs)
            loss = sum(
                image_loss(attack, lg, lb, ignore_index, t)
                for lg, lb in zip(logits, labels))
            grads = torch.autograd.grad(loss, xs)
        xs = [step(attack, x.detach(), g, o) for x, g, o in zip(xs, grads, x0)]
    return [x.detach() for x in xs]


def norms(x: Tensor, x0: Tensor) -> Tuple[float, float]:
    """The L-inf (0-255 levels) and L2 (0-1 scale) norms of ``x - x0``."""
    delta = (x - x0).double()
    return delta.abs().max().item(), delta.norm().item() / 255


@LOOPS.register_module()
class AdversarialTestLoop(TestLoop):
    """mmengine's ``TestLoop`` on adversarial images: each batch is
    attacked (:func:`perturb`), then predicted and evaluated as usual.

    Args:
        attack (dict): :class:`Attack`'s fields.
        **kwargs: ``TestLoop``'s arguments.
    """
    cell_type = Attack

    def __init__(self, runner, dataloader, evaluator, attack: Dict,
                 **kwargs) -> None:
        super().__init__(runner, dataloader, evaluator, **kwargs)
        self.attack = self.cell_type(**attack)
        self.max_linf = 0.
        self.max_l2 = 0.

    def run_iter(self, idx, data_batch: Dict) -> None:
        """Attack one batch, then predict and evaluate it."""
        self.runner.call_hook(
            'before_test_iter', batch_idx=idx, data_batch=data_batch)
        model = self.runner.model
        model = model.module if is_model_wrapper(model) else model
        head = getattr(model, 'decode_head', None)
        ignore = getattr(head, 'ignore_index', 255)
        samples = data_batch['data_samples']
        with autocast(enabled=self.fp16):
            xs = self.craft(model, data_batch['inputs'], samples, ignore)
            for x, img in zip(xs, data_batch['inputs']):
                linf, l2 = norms(x, img.to(x.device).float())
                self.max_linf, self.max_l2 = max(self.max_linf,
                                                 linf), max(self.max_l2, l2)
            with torch.no_grad():
                outputs = model.test_step(
                    dict(inputs=xs, data_samples=samples))
        self.evaluator.process(data_samples=outputs, data_batch=data_batch)
        self.runner.call_hook(
            'after_test_iter',
            batch_idx=idx,
            data_batch=data_batch,
            outputs=outputs)

    def start_keys(self, samples: Sequence) -> List[str]:
        """What seeds each image's draws: its path under the dataset's data
        root (:func:`~.keys.sample_keys`)."""
        dataset = getattr(getattr(self, 'dataloader', None), 'dataset', None)
        root = getattr(dataset, 'data_root', None)
        return sample_keys(samples, root)

    def craft(self, model, images, samples, ignore_index: int) -> List:
        """The batch's adversarial images (:func:`perturb` on ``model``)."""
        return perturb(
            model,
            images,
            samples,
            self.attack,
            ignore_index,
            start_keys=self.start_keys(samples))

    def perturbation_norms(self) -> Dict[str, float]:
        """``max_linf`` and ``max_l2`` over every process (call on all)."""
        found = torch.tensor([self.max_linf, self.max_l2], dtype=torch.float64)
        all_reduce(found, op='max')
        return dict(max_linf=found[0].item(), max_l2=found[1].item())
