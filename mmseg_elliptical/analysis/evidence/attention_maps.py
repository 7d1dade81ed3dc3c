"""Where one query pixel's token attends, in chosen layers and heads
(docs/evidence.md)."""
import copy
from contextlib import ExitStack
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmcv.transforms import Compose
from mmengine.dataset import pseudo_collate
from mmseg.apis import init_model

from ...utils.config import ModelSpec, load_config
from ...utils.loaders import dataset_pipelines
from .layers import AnalysisError, TransformerLayers, transformer_layers
from .recorder import LayerRecord, LayerRecorder
from .tokens import (attention_row, grid_to_image, input_point, query_token,
                     slide_boxes)


def default_layers(num_layers: int) -> List[int]:
    """Layer 1, the middle one and the last."""
    return sorted({min(1, num_layers - 1), num_layers // 2, num_layers - 1})


def prepare_image(model: nn.Module, cfg, image: str) -> Tuple:
    """``inputs`` ``[1, 3, H, W]`` and metainfo of one image through the
    config's test pipeline (without annotations) and data preprocessor."""
    pipeline = dataset_pipelines(cfg.test_dataloader.dataset)[0]
    pipeline = [
        copy.deepcopy(t) for t in pipeline
        if str(t.get('type', '')).split('.')[-1] != 'LoadAnnotations'
    ]
    data = Compose(pipeline)(dict(img_path=image))
    batch = model.data_preprocessor(pseudo_collate([data]), False)
    return batch['inputs'], batch['data_samples'][0].metainfo


def crop_of(test_cfg: Optional[Dict], input_shape: Sequence[int],
            point: Sequence[int]) -> Tuple[int, int, int, int]:
    """The crop the model sees around an input pixel ``(x, y)``: the whole
    input, or in slide mode the first crop (mmseg's order) holding it."""
    h, w = input_shape
    if not test_cfg or test_cfg.get('mode') != 'slide':
        return 0, h, 0, w
    x, y = point
    for box in slide_boxes((h, w), test_cfg['crop_size'], test_cfg['stride']):
        if box[0] <= y < box[1] and box[2] <= x < box[3]:
            return box
    raise ValueError(f'no slide crop holds input pixel ({x}, {y}).')


def check_map_layers(found: TransformerLayers, layers: Sequence[int],
                     name: str) -> None:
    """Raise an AnalysisError for layers out of range or without a grid."""
    n = len(found.layers)
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise AnalysisError(f'{name}: layers {bad} out of range; the '
                            f'{found.part} has layers 0..{n - 1}.')
    no_grid = [i for i in layers if found.layout(i).grid is None]
    if no_grid:
        raise AnalysisError(
            f'{name}: the tokens of {found.part} layers {no_grid} '
            f'({type(found.module).__name__}) are no image grid (its '
            'token_layout() says so): attention maps do not apply; '
            'representation collapse does.')


def _backbone_grids(model: nn.Module, found: TransformerLayers,
                    stack: ExitStack) -> Optional[LayerRecorder]:
    """A recorder of the backbone's grids, for ``'backbone'`` grids."""
    if all(layout.grid != 'backbone' for layout in found.layouts):
        return None
    backbone = transformer_layers(model, 'backbone')
    return stack.enter_context(
        LayerRecorder(backbone, tokens=False, grids=True))


def _grid(found: TransformerLayers, index: int, record: LayerRecord,
          backbone: Optional[LayerRecorder]) -> Tuple[Tuple, Tuple]:
    """The grid ``(h, w)`` and stride of one recorded call."""
    layout = found.layout(index)
    if layout.grid != 'backbone':
        return record.grids[0], tuple(int(s) for s in layout.stride)
    count = record.probs[0].shape[-2] - layout.prefix - layout.suffix
    found_grids = {(r.grids[0], tuple(backbone.found.layout(i).stride))
                   for i, r in enumerate(backbone.records)
                   if r.grids and r.grids[0][0] * r.grids[0][1] == count}
    if len(found_grids) != 1:
        raise ValueError(
            f'The {found.part}\'s {count} grid tokens match '
            f'{len(found_grids)} backbone grids ({sorted(found_grids)}), so '
            'their place on the image is unknown; declare the grid in its '
            'token_layout().')
    return found_grids.pop()


@torch.no_grad()
def model_attention(spec: ModelSpec,
                    image: str,
                    point: Sequence[int],
                    layers: Optional[Sequence[int]] = None,
                    part: str = 'backbone',
                    cfg_options: Optional[dict] = None,
                    device: str = 'cpu') -> Dict:
    """Run one model on an image, on the crop the model would see, and
    return its attention maps and ``m``.

    Args:
        spec (ModelSpec): The model.
        image (str): Image file.
        point (Sequence[int]): Query pixel ``(x, y)`` in the image.
        layers (Sequence[int], optional): Layers whose maps are kept
            (default: :func:`default_layers`).
        part (str): ``'backbone'`` or ``'decode_head'``.
        cfg_options (dict, optional): Overrides of the config.
        device (str): Device.

    Returns:
        dict: ``layers`` ``{layer: {maps [H, h, w], off_grid [H], grid,
        stride, query, stage}}``, ``relevance`` ``{layer: [H, d]}``,
        ``box``, ``input_shape``, ``img_shape``, ``ori_shape``,
        ``num_layers``.
    """
    cfg = load_config(spec.config, cfg_options)
    model = init_model(cfg, spec.checkpoint, device=device)
    return attention_of(model, cfg, image, point, layers, part, spec.name)


@torch.no_grad()
def attention_of(model: nn.Module,
                 cfg,
                 image: str,
                 point: Sequence[int],
                 layers: Optional[Sequence[int]] = None,
                 part: str = 'backbone',
                 name: str = 'model') -> Dict:
    """:func:`model_attention` on a built segmentor (in eval mode).

    Args:
        model (nn.Module): The segmentor; mmseg's own part is converted in
            place (see :func:`~.layers.transformer_layers`).
        cfg (Config): Its config (the test pipeline).
        image, point, layers, part: As :func:`model_attention`.
        name (str): The model's name in errors. Defaults to ``'model'``.

    Returns:
        dict: As :func:`model_attention`.
    """
    found = transformer_layers(model, part, convert=True)
    layers = sorted(set(layers)) if layers else default_layers(
        len(found.layers))
    check_map_layers(found, layers, name)
    inputs, meta = prepare_image(model, cfg, image)
    try:
        xy = input_point(point, meta['ori_shape'], meta['img_shape'])
    except ValueError as exc:
        raise AnalysisError(f'point: {exc}') from None
    box = crop_of(model.test_cfg, inputs.shape[-2:], xy)
    crop = inputs[:, :, box[0]:box[1], box[2]:box[3]]
    metas = [dict(meta, img_shape=tuple(crop.shape[-2:]))]
    with ExitStack() as stack:
        backbone = _backbone_grids(model, found, stack)
        rec = stack.enter_context(
            LayerRecorder(
                found, tokens=False, probs=layers, relevance=True,
                to_cpu=True))
        model.encode_decode(crop, metas)
    out = dict(
        layers={},
        relevance={},
        box=box,
        input_shape=tuple(inputs.shape[-2:]),
        img_shape=tuple(meta['img_shape'][:2]),
        ori_shape=tuple(meta['ori_shape'][:2]),
        num_layers=len(found.layers))
    for i, record in enumerate(rec.records):
        if record.relevance:
            out['relevance'][i] = record.relevance[0][0, :, 0].float().numpy()
        if i not in layers:
            continue
        if len(record.probs) != 1:
            raise ValueError(
                f'{name}: layer {i} attended {len(record.probs)} times '
                'in one forward of the model; expected once.')
        grid, stride = _grid(found, i, record, backbone)
        query = query_token(xy, box, stride, grid)
        maps, off_grid = attention_row(record.probs[0], found.layout(i), grid,
                                       query, found.attention(i))
        out['layers'][i] = dict(
            maps=maps,
            off_grid=off_grid,
            grid=grid,
            stride=stride,
            query=query,
            stage=found.stages[i])
    return out


def image_maps(result: Dict, layer: int) -> np.ndarray:
    """The maps of one layer at the original image's resolution
    (:func:`~.tokens.grid_to_image`)."""
    entry = result['layers'][layer]
    return grid_to_image(
        np.asarray(entry['maps']), entry['stride'], result['box'],
        result['input_shape'], result['img_shape'], result['ori_shape'])


def to_json(result: Dict) -> Dict:
    """:func:`model_attention`'s result as JSON data (lists, string keys)."""

    def plain(v):
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, tuple):
            return list(v)
        return v

    return plain(result)


def from_json(data: Dict) -> Dict:
    """The inverse of :func:`to_json`."""
    out = dict(data)
    out['layers'] = {
        int(k):
        dict(
            v,
            maps=np.asarray(v['maps'], dtype=np.float32),
            off_grid=np.asarray(v['off_grid']),
            grid=tuple(v['grid']),
            stride=tuple(v['stride']),
            query=tuple(v['query']))
        for k, v in data['layers'].items()
    }
    out['relevance'] = {
        int(k): np.asarray(v, dtype=np.float32)
        for k, v in data['relevance'].items()
    }
    for key in ('box', 'input_shape', 'img_shape', 'ori_shape'):
        out[key] = tuple(data[key])
    return out
