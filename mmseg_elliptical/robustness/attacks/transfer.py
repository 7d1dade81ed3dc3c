"""Transfer attacks: a model evaluated on the adversarial images crafted on
another (the source), a black-box leg of the gradient-masking audit.

A transfer cell is an ordinary attack cell of the *target* model, keyed
``ATTACK[-adaptive]@SOURCE/NORM/EPS/STEPS``: :class:`TransferTestLoop` runs
inside the target's grid loop, builds the source model once per cell from
its config and checkpoint, crafts each batch on it (:func:`~.attacks.perturb`
with the source's own ``predict``) and evaluates the target on the result.
The images are the target's test images (the twins share one test
pipeline), each process crafts its own share of them, and a transfer cell
resumes, batches and splits across processes as any cell.
"""
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from mmseg.apis import init_model
from mmseg.registry import LOOPS

from ...utils.config import ModelSpec, load_config
from .pgd import AdversarialTestLoop, Attack, perturb


@dataclass(frozen=True)
class TransferAttack(Attack):
    """An attack crafted on another model.

    Attributes:
        source (str): The source model's name (as the store keeps it).
        source_config (str): Its config.
        source_checkpoint (str): Its checkpoint.
        source_options (str): The grid's ``--cfg-options`` of its config,
            as JSON.
    """
    source: str = ''
    source_config: str = ''
    source_checkpoint: str = ''
    source_options: str = '{}'

    @property
    def key(self) -> str:
        """``ATTACK[-adaptive]@SOURCE/NORM/EPS/STEPS``."""
        name, rest = super().key.split('/', 1)
        return f'{name}@{self.source}/{rest}'


def transfer_cells(attacks: Sequence[Attack],
                   source: ModelSpec,
                   cfg_options: Optional[Dict] = None) -> List[TransferAttack]:
    """``attacks`` crafted on ``source``: one transfer cell each."""
    options = json.dumps(cfg_options or {}, sort_keys=True)
    return [
        TransferAttack(
            **a.to_dict(),
            source=source.name,
            source_config=source.config,
            source_checkpoint=source.checkpoint,
            source_options=options) for a in attacks
    ]


def build_source(attack: TransferAttack, device):
    """The source segmentor in eval mode on ``device``."""
    cfg = load_config(attack.source_config, json.loads(attack.source_options))
    return init_model(cfg, attack.source_checkpoint, device=str(device))


@LOOPS.register_module()
class TransferTestLoop(AdversarialTestLoop):
    """:class:`~.attacks.AdversarialTestLoop` whose images are crafted on
    the source model of a :class:`TransferAttack`.

    Args:
        attack (dict): :class:`TransferAttack`'s fields.
        **kwargs: ``AdversarialTestLoop``'s arguments.
    """

    cell_type = TransferAttack

    def __init__(self, runner, dataloader, evaluator, attack: Dict,
                 **kwargs) -> None:
        super().__init__(runner, dataloader, evaluator, attack, **kwargs)
        self.source = None

    def craft(self, model, images, samples, ignore_index: int) -> List:
        """The batch's adversarial images, crafted on the source model."""
        if self.source is None:
            device = next(model.parameters()).device
            self.source = build_source(self.attack, device)
        head = getattr(self.source, 'decode_head', None)
        return perturb(
            self.source,
            images,
            samples,
            self.attack,
            getattr(head, 'ignore_index', ignore_index),
            start_keys=self.start_keys(samples))
