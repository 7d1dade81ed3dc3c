"""The method's evidence while training: collapse, ``m``, attention entropy
and pictures, to every backend of the runner's visualizer."""
import copy
import time
from typing import Dict, List, Optional, Sequence

import mmcv
import torch
import torch.nn as nn
from mmengine.dataset import pseudo_collate
from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmseg.registry import HOOKS

from ...analysis import (RELEVANCE_KEYS, CollapseMeter, LayerRecorder,
                         TransformerLayers, attention_figure, attention_of,
                         layer_entropy, relevance_figure, shown_heads,
                         transformer_layers)
from ...errors import AnalysisError, ConfigError
from ...models import PARTS, EllipticalTransformerMixin
from ...utils.output import figure_array
from ...utils.state import kept_modes, kept_rng


def _positive(name: str, value, none: bool = False) -> None:
    if none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f'EllipticalEvidenceHook: {name}={value!r} must be '
                          'a positive integer (iterations or images)' +
                          (', or None' if none else '') + '.')


@HOOKS.register_module()
class EllipticalEvidenceHook(Hook):
    """Measure the evidence on a fixed probe set while training.

    Every ``interval`` training iterations and after each validation, on
    rank 0, in eval mode and without gradient (the mode, the weights and
    every random state are left as they were), the first ``num_images``
    images of the validation dataloader go through the model. Per layer of
    ``part`` (``L<i>``: the analysis tools' global index) it logs, with the
    visualizer's ``add_scalars`` (every configured backend):
    ``collapse/<part>/L<i>`` (``tools/analysis_tools/collapse.py``'s mean
    pairwise cosine), ``m_mean``, ``m_min``, ``m_effective`` (``(sum m)^2 /
    sum m^2 / d``: 1 for dot product) and ``m_spread`` of elliptical
    layers, and ``entropy`` (mean attention entropy, nats). Every
    ``image_interval`` iterations it adds images: the attention of the
    query ``point`` in the first probe image per layer and ``m`` per layer
    and head (as ``tools/analysis_tools/attention_maps.py`` draws them),
    and the probe images with ground truth and prediction (mmseg's
    ``SegLocalVisualizer.add_datasample``). mmseg's own dot-product parts
    are measured on a converted copy.

    Args:
        interval (int): Training iterations between measures. Defaults to
            100.
        image_interval (int, optional): Iterations between images; None: no
            images. Defaults to 1000.
        num_images (int): Probe images. Defaults to 4.
        part (str): ``'backbone'`` or ``'decode_head'``.
        point (Sequence[int], optional): Query pixel ``(x, y)`` in the first
            probe image; default its centre.
        heads (Sequence[int], optional): Heads of the attention figure;
            default the first 4.

    Raises:
        ConfigError: Bad arguments, when the hook is built; a probe set
            larger than the validation set, a point outside the first probe
            image or a part the model does not have, when the run starts.
    """
    priority = 'LOW'

    def __init__(self,
                 interval: int = 100,
                 image_interval: Optional[int] = 1000,
                 num_images: int = 4,
                 part: str = 'backbone',
                 point: Optional[Sequence[int]] = None,
                 heads: Optional[Sequence[int]] = None) -> None:
        _positive('interval', interval)
        _positive('image_interval', image_interval, none=True)
        _positive('num_images', num_images)
        if part not in PARTS:
            raise ConfigError(f'EllipticalEvidenceHook: part={part!r} must be '
                              f'one of {list(PARTS)}.')
        if point is not None and (len(point) != 2 or not all(
                isinstance(v, int) and v >= 0 for v in point)):
            raise ConfigError(
                f'EllipticalEvidenceHook: point={point!r} must be two '
                'non-negative integers (x, y): a pixel of the first probe '
                'image.')
        self.interval = interval
        self.image_interval = image_interval
        self.num_images = num_images
        self.part = part
        self.point = None if point is None else tuple(point)
        self.heads = heads
        self.batches: List[dict] = []
        self._last_step: Optional[int] = None
        #: Seconds spent measuring so far (what the hook costs a run).
        self.seconds = 0.0

    def before_run(self, runner) -> None:
        """Check the probe set, the point and the part; load the probe."""
        if runner.cfg.get('val_dataloader') is None or \
                runner.val_loop is None:
            raise ConfigError(
                'EllipticalEvidenceHook probes the first images of the '
                'validation dataloader: give the config a val_dataloader, '
                'val_cfg and val_evaluator.')
        loader = runner.val_loop.dataloader
        if self.num_images > len(loader.dataset):
            raise ConfigError(
                f'EllipticalEvidenceHook: num_images={self.num_images} but '
                f'the validation set has {len(loader.dataset)} images; ask '
                'for at most that many.')
        try:
            transformer_layers(runner.model, self.part)
        except AnalysisError as exc:
            raise ConfigError(
                f'EllipticalEvidenceHook: part={self.part!r}: {exc}') from None
        with kept_rng():
            items = [loader.dataset[i] for i in range(self.num_images)]
        h, w = items[0]['data_samples'].ori_shape[:2]
        x, y = self.point or (w // 2, h // 2)
        if x >= w or y >= h:
            raise ConfigError(
                f'EllipticalEvidenceHook: point=({x}, {y}) lies outside the '
                f'first probe image ({w} x {h}, '
                f'{items[0]["data_samples"].img_path}); x is the column, '
                f'0..{w - 1}, y the row, 0..{h - 1}.')
        self.point = (x, y)
        size = loader.batch_size or 1
        self.batches = [
            pseudo_collate(items[i:i + size])
            for i in range(0, len(items), size)
        ]

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs=None) -> None:
        images = self.image_interval is not None and \
            self.every_n_train_iters(runner, self.image_interval)
        if images or self.every_n_train_iters(runner, self.interval):
            self.measure(runner, runner.iter + 1, images)

    def after_val_epoch(self, runner, metrics=None) -> None:
        if self.batches:
            self.measure(runner, runner.iter, False)

    def measure(self, runner, step: int, images: bool = False) -> None:
        """Measure the probe set and log it at ``step`` (rank 0 only)."""
        if not is_main_process() or step == self._last_step:
            return
        self._last_step = step
        start = time.perf_counter()
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        with kept_rng(), kept_modes(model), torch.no_grad():
            probe = model if isinstance(
                getattr(model, self.part),
                EllipticalTransformerMixin) else copy.deepcopy(model)
            found = transformer_layers(probe, self.part, convert=True)
            outputs = []
            with CollapseMeter(found) as meter:
                for batch in self.batches:
                    outputs += probe.test_step(copy.deepcopy(batch))
                    meter.collect()
            entropy = layer_entropy(probe, found, copy.deepcopy(self.batches))
            scalars = self.scalars(meter.result(), entropy)
            runner.visualizer.add_scalars(scalars, step=step)
            runner.message_hub.update_info('elliptical_evidence', scalars)
            if images:
                self.draw(runner, probe, found, outputs, step)
        self.seconds += time.perf_counter() - start

    def scalars(self, collapse: Dict,
                entropy: List[Optional[float]]) -> Dict[str, float]:
        """The scalars of one measure, named ``<measure>/<part>/L<i>``."""
        n = len(collapse['cosine'])
        out = {}
        for i in range(n):
            layer = f'{self.part}/L{i:0{len(str(n - 1))}d}'
            values = dict(collapse=collapse['cosine'][i], entropy=entropy[i])
            for name in RELEVANCE_KEYS.values():
                values[name.replace('relevance_', 'm_')] = collapse[name][i]
            out.update({
                f'{k}/{layer}': v
                for k, v in values.items() if v is not None
            })
        return out

    def draw(self, runner, probe: nn.Module, found: TransformerLayers,
             outputs: list, step: int) -> None:
        """Add the attention, ``m`` and prediction images at ``step``
        (``found``: the probe's layers, as :meth:`measure` found them)."""
        vis = runner.visualizer
        grid = [
            i for i in range(len(found.layers))
            if found.layout(i).grid is not None
        ]
        name = f'iter {step}'
        image = outputs[0].img_path
        if grid:
            result = attention_of(probe, runner.cfg, image, self.point, grid,
                                  self.part, name)
            heads = shown_heads({name: result}, grid, self.heads)
            fig = attention_figure(
                mmcv.imread(image, channel_order='rgb'), {name: result},
                self.point,
                grid,
                heads,
                False,
                rows='layers')
            vis.add_image(f'evidence_attention_{self.part}', figure_array(fig),
                          step)
        else:  # no image grid (decoder queries): m only
            with LayerRecorder(found, tokens=False, relevance=True) as rec:
                probe.test_step(copy.deepcopy(self.batches[0]))
            result = dict(
                relevance={
                    i: r.relevance[0][0, :, 0].float().cpu().numpy()
                    for i, r in enumerate(rec.records) if r.relevance
                })
        fig = relevance_figure({name: result}, self.part)
        if fig is not None:
            vis.add_image(f'evidence_m_{self.part}', figure_array(fig), step)
        if hasattr(vis, 'add_datasample'):  # mmseg's SegLocalVisualizer
            for k, sample in enumerate(outputs):
                img = mmcv.imread(sample.img_path, channel_order='rgb')
                vis.add_datasample(
                    f'evidence_probe_{k}',
                    img,
                    sample,
                    step=step,
                    with_labels=min(img.shape[:2]) >= 256)
