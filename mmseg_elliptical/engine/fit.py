"""Whether a checkpoint's weights fit a config's model, checked before the
plugin's tools run anything (mmengine and mmseg load with ``strict=False``;
the tools refuse a misfit unless the user asks for a partial load)."""
import argparse
import copy
import logging
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.runner.checkpoint import CheckpointLoader
from mmseg.apis import init_model

from ..errors import CheckpointError, ConfigError
from ..utils.config import load_config
from ..utils.devices import check_device
from ..utils.registry import check_model_types
from ..utils.unknown_types import unknown_types_as_config_errors


class WeightsFit(NamedTuple):
    """How a checkpoint's state dict meets a model's.

    Attributes:
        missing (list[str]): Model keys the checkpoint lacks.
        unexpected (list[str]): Checkpoint keys the model lacks.
        mismatched (list[tuple]): ``(key, checkpoint shape, model shape)``.
        total (int): Keys of the model.
    """
    missing: List[str]
    unexpected: List[str]
    mismatched: List[Tuple[str, tuple, tuple]]
    total: int

    @property
    def exact(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self) -> str:
        """What does not fit, in one sentence with the first of each."""
        parts = []
        if self.missing:
            parts.append(f'{len(self.missing)} of them are not in the '
                         f'checkpoint (first: {self.missing[0]})')
        if self.unexpected:
            parts.append(f'{len(self.unexpected)} of the checkpoint\'s are '
                         f'not in the model (first: {self.unexpected[0]})')
        if self.mismatched:
            key, theirs, ours = self.mismatched[0]
            parts.append(f'{len(self.mismatched)} differ in shape (first: '
                         f'{key}, {list(theirs)} in the checkpoint, '
                         f'{list(ours)} in the model)')
        return f'the model has {self.total} weight tensors: ' + ', '.join(
            parts)


def checkpoint_state(checkpoint: Dict) -> Dict:
    """The state dict of a loaded checkpoint, as mmengine's
    ``load_checkpoint`` takes it (``state_dict``, DDP's ``module.``
    prefix removed)."""
    state = checkpoint.get('state_dict', checkpoint)
    return {re.sub(r'^module\.', '', k): v for k, v in state.items()}


def weights_fit(model_state: Dict, state: Dict) -> WeightsFit:
    """Compare a checkpoint's state dict with a model's.

    Args:
        model_state (dict): ``model.state_dict()``.
        state (dict): The checkpoint's (:func:`checkpoint_state`).

    Returns:
        WeightsFit: What is missing, unexpected or of another shape.
    """
    mismatched = [(k, tuple(state[k].shape), tuple(v.shape))
                  for k, v in model_state.items()
                  if k in state and hasattr(state[k], 'shape')
                  and tuple(state[k].shape) != tuple(v.shape)]
    return WeightsFit(
        missing=[k for k in model_state if k not in state],
        unexpected=[k for k in state if k not in model_state],
        mismatched=mismatched,
        total=len(model_state))


def _type_of(part) -> Optional[str]:
    """The class name a model part's config gives (the first of a list)."""
    if isinstance(part, (list, tuple)) and part:
        part = part[0]
    kind = part.get('type') if isinstance(part, dict) else None
    return kind.split('.')[-1] if isinstance(kind, str) else None


def swapped_types(cfg, meta: Optional[Dict], config: str,
                  checkpoint: str) -> Optional[str]:
    """Name a backbone or decode head type of ``cfg`` other than the one
    the checkpoint was trained with (the config mmengine's runner records
    in its ``meta['cfg']``): a test-time swap, or swapped pairs.

    Returns:
        str, optional: One line naming both types; None when they agree or
        the checkpoint records no readable config.
    """
    text = (meta or {}).get('cfg')
    if not isinstance(text, str):
        return None
    try:
        trained = Config.fromstring(text, '.py').get('model') or {}
    except Exception:  # noqa: BLE001  # an unreadable record says nothing
        return None
    parts = [(part, _type_of(trained.get(part)), _type_of(cfg.model.get(part)))
             for part in ('backbone', 'decode_head')]
    parts = [
        f'{part} {theirs} in training, {ours} here'
        for part, theirs, ours in parts if theirs and ours and theirs != ours
    ]
    if not parts:
        return None
    return (f'Checkpoint {checkpoint} was trained with another model than '
            f'{config} ({"; ".join(parts)}; from its meta): the results are '
            f'those of {config}\'s model with these weights (a test-time '
            'swap?).')


def check_weights_fit(config: str,
                      checkpoint: str,
                      cfg_options: Optional[Dict] = None,
                      allow_partial: bool = False,
                      swaps: Optional[List[str]] = None) -> Optional[str]:
    """Refuse a checkpoint whose weights do not fit the config's model.

    Builds the model on the CPU and reads the checkpoint once; nothing runs.

    Args:
        config (str): The config file.
        checkpoint (str): The checkpoint (already checked to be one).
        cfg_options (dict, optional): The tool's ``--cfg-options``.
        allow_partial (bool): Accept a partial load (``--allow-partial``).
        swaps (list[str], optional): Gets the :func:`swapped_types` line,
            if any.

    Returns:
        str, optional: With ``allow_partial``, a note for the report when
        the weights do not fit; None when they do.

    Raises:
        CheckpointError: The weights do not fit and ``allow_partial`` is
            False.
        ConfigError: The model cannot be built as configured.
    """
    cfg = load_config(config, copy.deepcopy(cfg_options), no_pretrained=True)
    check_model_types(cfg)
    with unknown_types_as_config_errors():
        model_state = init_model(cfg, None, device='cpu').state_dict()
    loaded = CheckpointLoader.load_checkpoint(
        checkpoint, map_location='cpu', logger='silent')
    swap = swapped_types(cfg, loaded.get('meta'), config, checkpoint)
    if swap and swaps is not None:
        swaps.append(swap)
    fit = weights_fit(model_state, checkpoint_state(loaded))
    if fit.exact:
        return None
    if allow_partial:
        return (f'Partial load (--allow-partial): {checkpoint} into '
                f'{config} ({fit.summary()}); those weights stay random.')
    raise CheckpointError(
        f'Checkpoint {checkpoint} does not fit the model of {config} '
        f'({fit.summary()}). Give the checkpoint trained with this config '
        '(the pairs are CONFIG CHECKPOINT), or add --allow-partial to load '
        'only what fits and leave the rest random.')


def check_models_fit(specs: Sequence,
                     cfg_options: Optional[Dict] = None,
                     allow_partial: bool = False) -> List[str]:
    """:func:`check_weights_fit` for every ``CONFIG CHECKPOINT`` model of a
    tool; each note (a partial load, a swapped backbone or head type) is
    also printed.

    Args:
        specs (Sequence[ModelSpec]): The models.
        cfg_options (dict, optional): The tool's ``--cfg-options``.
        allow_partial (bool): Accept partial loads.

    Returns:
        list[str]: The notes of the partial loads (``name: note``).
    """
    notes = []
    for spec in specs:
        swaps: List[str] = []
        note = check_weights_fit(spec.config, spec.checkpoint, cfg_options,
                                 allow_partial, swaps)
        for line in swaps + [note] * bool(note):
            notes.append(f'{spec.name}: {line}')
            print_log(notes[-1], logger='current', level=logging.WARNING)
    return notes


def note_partial_loads(report: str, notes: Sequence[str]) -> str:
    """Append the partial-load notes to a markdown report file.

    Returns:
        str: The appended text ('' without notes).
    """
    if not notes:
        return ''
    text = '\n' + '\n'.join(f'**{n}**\n' for n in notes)
    with open(report, 'a') as f:
        f.write(text)
    return text


def fitting_models(parser: argparse.ArgumentParser,
                   specs: Sequence,
                   cfg_options: Optional[Dict] = None,
                   allow_partial: bool = False) -> List[str]:
    """:func:`check_models_fit` as a tool's last argument check: a
    checkpoint that does not fit, or a model that cannot be built, is a
    command-line error (so ``tools/check_args.py`` stops a launch before
    torchrun).

    Returns:
        list[str]: The notes of the partial loads.
    """
    try:
        return check_models_fit(specs, cfg_options, allow_partial)
    except CheckpointError as e:
        parser.error(f'argument CONFIG CHECKPOINT: {e}')
    except ConfigError as e:
        parser.error(str(e))


def checked_models(args: argparse.Namespace) -> List[str]:
    """A model tool's last argument checks, in its ``main``: the GPU of
    ``args.device`` is there (:func:`check_device`) and each of
    ``args.specs`` fits its checkpoint (:func:`fitting_models`, with
    ``args.cfg_options`` and ``args.allow_partial``).

    Returns:
        list[str]: The notes of the partial loads.
    """
    check_device(args.parser, args.device)
    return fitting_models(args.parser, args.specs, args.cfg_options,
                          args.allow_partial)
