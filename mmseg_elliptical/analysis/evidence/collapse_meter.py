"""Representation collapse per layer, measured: mean pairwise cosine of
the tokens, and the spread of ``m`` (docs/evidence.md; the report:
:mod:`.collapse`)."""
from typing import Dict, List, Optional

import torch
from mmengine.dist import collect_results, is_main_process
from mmengine.runner import Runner
from mmengine.utils import ProgressBar
from mmseg.apis import init_model

from ...models import EllipticalAttentionMixin
from ...utils.config import ModelSpec, load_config, split_loader
from ...utils.loaders import subset_loader_cfg
from .layers import TransformerLayers, transformer_layers
from .measures import (mean_pairwise_cosine, relevance_spread,
                       relevance_statistics)
from .recorder import LayerRecorder

#: Per-image statistics of ``m`` (:class:`CollapseMeter`) and the names of
#: their per-layer results (the minimum of ``m_min``, the mean of the rest).
RELEVANCE_KEYS = dict(
    spread='relevance_spread',
    m_mean='relevance_mean',
    m_min='relevance_min',
    m_effective='relevance_effective')


def inference_mode(test_cfg: Optional[Dict]) -> str:
    """How the segmentor runs at test time, in words (the report's)."""
    test_cfg = test_cfg or {}
    if test_cfg.get('mode') == 'slide':
        crop, stride = test_cfg['crop_size'], test_cfg['stride']
        return (f'slide: per crop of {crop[0]}x{crop[1]}, stride '
                f'{stride[0]}x{stride[1]}')
    return 'whole image'


class CollapseMeter:
    """Context manager: the collapse of every layer over the forwards run
    inside it (call :meth:`collect` after each batch).

    Args:
        found (TransformerLayers): The layers (found with ``convert=True``
            for the spread of ``m``).
    """

    def __init__(self, found: TransformerLayers) -> None:
        self.found = found
        #: One entry per image, in the order collected: per layer the
        #: ``cosine``, ``spread`` and ``m_mean`` / ``m_min`` /
        #: ``m_effective`` of each forward and the counted ``tokens``.
        self.images: List[Dict] = []
        relevance = all(
            isinstance(found.attention(i), EllipticalAttentionMixin)
            for i in range(len(found.layers)))
        self.recorder = LayerRecorder(
            found, relevance=relevance, grids=False, to_cpu=True)

    def __enter__(self) -> 'CollapseMeter':
        self.recorder.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.recorder.__exit__(*exc)

    @torch.no_grad()
    def collect(self) -> None:
        """Take the statistics of the batch recorded since the last call and
        drop its tokens."""
        n = len(self.found.layers)
        batch: List[Dict] = []
        for i, record in enumerate(self.recorder.records):
            for out in record.tokens:
                counted = self.found.counted_tokens(i, out)
                cos = mean_pairwise_cosine(counted).tolist()
                while len(batch) < len(cos):
                    batch.append(
                        dict(
                            tokens=[0] * n,
                            **{
                                k: [[] for _ in range(n)]
                                for k in ('cosine', *RELEVANCE_KEYS)
                            }))
                for image, value in zip(batch, cos):
                    image['cosine'][i].append(value)
                    image['tokens'][i] = counted.shape[1]
            for m in record.relevance:
                stats = relevance_statistics(m)
                stats = dict(
                    spread=relevance_spread(m),
                    **{
                        f'm_{k}': v
                        for k, v in stats.items()
                    })
                for key, values in stats.items():
                    for image, value in zip(batch, values.tolist()):
                        image[key][i].append(value)
        self.images += batch
        self.recorder.clear()

    def result(self, images: Optional[List[Dict]] = None) -> Dict:
        """Per layer ``cosine`` and ``cosine_std`` (over samples: every
        forward of every image), ``relevance_spread``, ``relevance_mean``,
        ``relevance_min`` (the minimum over samples) and
        ``relevance_effective`` (each None for dot-product layers), ``stage``
        and ``tokens`` (counted tokens of the last image), and ``samples``.

        Args:
            images (list[dict], optional): Defaults to :attr:`images`.
        """
        images = self.images if images is None else images
        if not images:
            raise ValueError('No forward of the layers was collected.')
        out = dict(
            cosine=[],
            cosine_std=[],
            **{key: []
               for key in RELEVANCE_KEYS.values()},
            stage=list(self.found.stages),
            tokens=list(images[-1]['tokens']))
        n = len(self.found.layers)
        for i in range(n):
            cos = torch.tensor([v for im in images for v in im['cosine'][i]],
                               dtype=torch.float64)
            out['cosine'].append(cos.mean().item())
            out['cosine_std'].append(cos.std(correction=0).item())
            for key, name in RELEVANCE_KEYS.items():
                values = torch.tensor([v for im in images for v in im[key][i]],
                                      dtype=torch.float64)
                reduce = values.min if key == 'm_min' else values.mean
                out[name].append(reduce().item() if len(values) else None)
        out['samples'] = sum(len(im['cosine'][0]) for im in images)
        return out


@torch.no_grad()
def measure_collapse(spec: ModelSpec,
                     split: str = 'test',
                     part: str = 'backbone',
                     max_images: Optional[int] = None,
                     cfg_options: Optional[dict] = None,
                     device: str = 'cpu',
                     progress: bool = True) -> Optional[Dict]:
    """Per-layer mean pairwise cosine and relevance spread of one model,
    over the config's ``<split>_dataloader`` and ``model.test_step``.

    Args:
        spec (ModelSpec): The model.
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        part (str): ``'backbone'`` or ``'decode_head'``.
        max_images (int, optional): Use only the first images.
        cfg_options (dict, optional): Overrides of the config.
        device (str): ``'cuda'`` is this process's GPU.
        progress (bool): Show a progress bar (rank 0).

    Returns:
        dict: :meth:`CollapseMeter.result` plus ``images`` and
        ``inference``; None on the processes but rank 0.
    """
    cfg = load_config(spec.config, cfg_options)
    loader_cfg = subset_loader_cfg(
        split_loader(cfg, split), max_images, shuffle=False)
    if device == 'cuda' and torch.cuda.is_available():
        device = f'cuda:{torch.cuda.current_device()}'
    model = init_model(cfg, spec.checkpoint, device=device)
    found = transformer_layers(model, part, convert=True)  # to record m
    loader = Runner.build_dataloader(loader_cfg)
    bar = ProgressBar(len(loader)) if progress and is_main_process() \
        else None
    with CollapseMeter(found) as meter:
        for batch in loader:
            model.test_step(batch)
            meter.collect()
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.file.write('\n')
    images = collect_results(meter.images, len(loader.dataset), 'cpu')
    if not is_main_process():
        return None
    return dict(
        meter.result(images),
        images=len(images),
        inference=inference_mode(cfg.model.get('test_cfg')))
