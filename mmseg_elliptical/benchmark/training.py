"""The benchmark's adversarial-training mode: one training step with the
attack that ``AdversarialTrainingHook`` runs before each step
(:class:`~mmseg_elliptical.robustness.attacks.training.TrainingAttacker`:
the attack on the training-time forward), then the real step
(``train_step``: forward, loss, backward, optimiser), against a plain
training step of the same model, every model and mode timed in the same
interleaved rounds (docs/benchmark.md).
"""
import copy
import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import torch
from mmengine.optim import OptimWrapper
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample
from torch.utils.benchmark.utils.common import set_torch_threads

from ..robustness.attacks.training import TrainingAttacker, check_model
from . import BenchModel, build_model
from .runner import BenchmarkOptions
from .timing import make_timer, paired_ratio, run_interleaved, time_stats

PLAIN = 'plain'
#: The hook's attack of each recipe timed, as its config writes it: the
#: demo's cheap recipe (``configs/demo/*_adversarial.py``) and the cheap
#: 2-step PGD-AT (``configs/_base_/adversarial_training_cheap.py``; PIR-AT
#: as SEA trains, ``adversarial_training.py``, runs 5 steps of the same).
RECIPES: Dict[str, Dict] = {
    'pgd-1':
    dict(
        name='pgd',
        norm='linf',
        eps=4,
        steps=1,
        step_size=5,
        random_start=True),
    'pgd-at-2':
    dict(
        name='pgd',
        norm='linf',
        eps=4,
        steps=2,
        step_size=2.55,
        random_start=False),
}
#: The optimiser of every step (mmseg's transformer recipes' AdamW).
LR, WEIGHT_DECAY = 6e-5, 0.01


def training_segmentor(spec: BenchModel,
                       size: int,
                       device: str = 'cpu',
                       seed: int = 0) -> torch.nn.Module:
    """``spec``'s segmentor in training mode, its data preprocessor padding
    to ``size`` (not the config's crop size); refused as the hook refuses
    it (:func:`~mmseg_elliptical.robustness.attacks.training.check_model`)."""
    cfg = copy.deepcopy(spec.model_cfg)
    if isinstance(cfg.get('data_preprocessor'), dict):
        cfg['data_preprocessor']['size'] = (size, size)
    model = build_model(
        dataclasses.replace(spec, model_cfg=cfg, whole_model=True), device,
        seed).model
    check_model(model)
    return model.train()


def training_batch(model: torch.nn.Module,
                   size: int,
                   batch_size: int = 1,
                   seed: int = 0) -> Dict:
    """A data batch as the training loader gives it: ``[3, size, size]``
    0-255 images and random labels of the head's classes (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    device = model.data_preprocessor.device
    inputs, samples = [], []
    for i in range(batch_size):
        inputs.append(
            (torch.rand(3, size, size, generator=gen) * 255).to(device))
        sample = SegDataSample(
            metainfo=dict(
                img_path=f'benchmark/{i}.png',
                img_shape=(size, size),
                ori_shape=(size, size)))
        labels = torch.randint(
            model.decode_head.num_classes, (1, size, size), generator=gen)
        sample.gt_sem_seg = PixelData(data=labels.to(device))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


class TrainingStep:
    """One training iteration of ``model`` on a copy of ``batch``: the
    hook's attack (:meth:`TrainingAttacker.attack_batch`, with the accuracy
    it logs; none for a plain step), then ``model.train_step`` with
    ``optim_wrapper`` (the real step).

    Args:
        model (nn.Module): The segmentor, in training mode.
        batch (dict): The data batch (:func:`training_batch`).
        optim_wrapper (OptimWrapper): The step's optimiser.
        attacker (TrainingAttacker, optional): The attack; None: plain.
    """

    def __init__(self,
                 model: torch.nn.Module,
                 batch: Dict,
                 optim_wrapper: OptimWrapper,
                 attacker: Optional[TrainingAttacker] = None) -> None:
        self.model, self.batch, self.attacker = model, batch, attacker
        self.optim_wrapper = optim_wrapper

    def __call__(self) -> Dict:
        """Run the iteration; return ``train_step``'s log variables."""
        data = dict(
            inputs=[x.clone() for x in self.batch['inputs']],
            data_samples=self.batch['data_samples'])
        if self.attacker is not None:
            self.attacker.attack_batch(self.model, data, 0, 0,
                                       self.optim_wrapper)
        return self.model.train_step(data, self.optim_wrapper)


def training_steps(spec: BenchModel, size: int,
                   options: BenchmarkOptions) -> Dict[str, TrainingStep]:
    """The plain step and each :data:`RECIPES`' step of ``spec``'s model
    (one model, optimiser and batch for all)."""
    model = training_segmentor(spec, size, options.device, options.seed)
    wrapper = OptimWrapper(
        torch.optim.AdamW(
            model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY))
    batch = training_batch(model, size, options.batch_size, options.seed)
    attackers = {
        name: TrainingAttacker(attack, seed=options.seed)
        for name, attack in RECIPES.items()
    }
    return {
        name: TrainingStep(model, batch, wrapper, attackers.get(name))
        for name in (PLAIN, *RECIPES)
    }


def measure_training(
        specs: Sequence[BenchModel],
        sizes: Sequence[int],
        options: BenchmarkOptions,
        on_step: Optional[Callable[[], None]] = None) -> List[Dict]:
    """Time every model's plain and adversarial training steps at each size,
    all in the same interleaved rounds (``options``' rounds, warm-up,
    threads, clock, batch size, device and seed; eager, fp32).

    Returns:
        list[dict]: Per model, size and recipe: ``plain_ms``, ``at_ms``
        (medians of the rounds), the recipe's ``attack`` and adversarial /
        plain step time paired per round (``time``, ``time_q1``,
        ``time_q3``, ``rounds``).
    """
    rows = []
    with set_torch_threads(options.threads or torch.get_num_threads()):
        for size in sizes:
            steps = {
                (s.name, recipe): step
                for s in specs
                for recipe, step in training_steps(s, size, options).items()
            }
            for step in steps.values():
                for _ in range(options.warmup):
                    step()
            timers = {
                key:
                make_timer(step, f'{size}x{size} {key[1]}', key[0], 'training',
                           torch.get_num_threads(), options.clock)
                for key, step in steps.items()
            }
            rounds = run_interleaved(timers, options.rounds,
                                     options.min_run_time, options.seed,
                                     on_step)
            for spec in specs:
                plain = time_stats(rounds[(spec.name, PLAIN)])
                for recipe, attack in RECIPES.items():
                    at = time_stats(rounds[(spec.name, recipe)])
                    rows.append(
                        dict(
                            family=spec.family,
                            model=spec.name,
                            role=spec.role,
                            size=size,
                            batch_size=options.batch_size,
                            recipe=recipe,
                            attack=attack,
                            plain_ms=plain['median_ms'],
                            at_ms=at['median_ms'],
                            **paired_ratio(at['round_ms'],
                                           plain['round_ms']).row()))
    return rows
