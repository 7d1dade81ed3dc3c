"""Checkpoints: timm/DeiT conversion, dot-product <-> elliptical Segmenter
checkpoints, and mmengine checkpoints under torch's weights-only loader."""
import argparse
import json
import os
import os.path as osp
import pickle
import runpy
import sys
from typing import Dict

import pytest
import torch
import torch.nn.functional as F
from conftest import DEMO_DOT, DEMO_ELLIPTICAL, ROOT, run_command, tiny_config
from mmengine.runner import CheckpointLoader, Runner, load_checkpoint
from mmengine.runner.checkpoint import save_checkpoint
from mmseg.apis import init_model
from mmseg.models.backbones import VisionTransformer
from mmseg.registry import MODELS
from mmseg.utils import register_all_modules
from torch import Tensor

from mmseg_elliptical.converters import convert_deit
from mmseg_elliptical.engine import load_from_local
from mmseg_elliptical.models import EllipticalVisionTransformer

pytestmark = pytest.mark.usefixtures('single_thread')

DIM, HEADS, DEPTH, PATCH, IMG, MLP = 24, 3, 2, 8, 32, 48
ARCH = dict(
    img_size=IMG,
    patch_size=PATCH,
    embed_dims=DIM,
    num_heads=HEADS,
    num_layers=DEPTH,
    mlp_ratio=MLP // DIM,
    final_norm=True,
    norm_cfg=dict(type='LN', eps=1e-6),
    with_cls_token=True,
    patch_bias=True)  # timm's patch embedding has a bias


def timm_state_dict(distilled: bool = False) -> Dict[str, Tensor]:
    """A tiny ViT state dict in timm / DeiT layout with random tensors."""
    gen = torch.Generator().manual_seed(0)

    def rnd(*shape: int, scale: float = 0.2) -> Tensor:
        return torch.randn(*shape, generator=gen) * scale

    tokens = 2 if distilled else 1
    sd = {
        'cls_token': rnd(1, 1, DIM),
        'pos_embed': rnd(1, (IMG // PATCH)**2 + tokens, DIM),
        'patch_embed.proj.weight': rnd(DIM, 3, PATCH, PATCH, scale=0.05),
        'patch_embed.proj.bias': rnd(DIM),
        'norm.weight': 1 + rnd(DIM),
        'norm.bias': rnd(DIM),
        'head.weight': rnd(10, DIM),
        'head.bias': rnd(10),
    }
    for i in range(DEPTH):
        p = f'blocks.{i}.'
        sd.update({
            p + 'norm1.weight': 1 + rnd(DIM),
            p + 'norm1.bias': rnd(DIM),
            p + 'attn.qkv.weight': rnd(3 * DIM, DIM),
            p + 'attn.qkv.bias': rnd(3 * DIM),
            p + 'attn.proj.weight': rnd(DIM, DIM),
            p + 'attn.proj.bias': rnd(DIM),
            p + 'norm2.weight': 1 + rnd(DIM),
            p + 'norm2.bias': rnd(DIM),
            p + 'mlp.fc1.weight': rnd(MLP, DIM),
            p + 'mlp.fc1.bias': rnd(MLP),
            p + 'mlp.fc2.weight': rnd(DIM, MLP),
            p + 'mlp.fc2.bias': rnd(DIM)
        })
    if distilled:
        sd.update({
            'dist_token': rnd(1, 1, DIM),
            'head_dist.weight': rnd(10, DIM),
            'head_dist.bias': rnd(10)
        })
    return sd


def timm_forward(sd: Dict[str, Tensor], img: Tensor) -> Tensor:
    """timm's ViT forward written out from the source keys.

    Returns:
        Tensor: The normalised patch tokens as a map ``[B, C, h, w]``.
    """
    x = F.conv2d(
        img,
        sd['patch_embed.proj.weight'],
        sd['patch_embed.proj.bias'],
        stride=PATCH)
    B, C, h, w = x.shape
    x = torch.cat(
        [sd['cls_token'].expand(B, -1, -1),
         x.flatten(2).transpose(1, 2)], 1) + sd['pos_embed']
    for i in range(DEPTH):
        p = f'blocks.{i}.'
        y = F.layer_norm(x, (C, ), sd[p + 'norm1.weight'],
                         sd[p + 'norm1.bias'], 1e-6)
        q, k, v = F.linear(y, sd[p + 'attn.qkv.weight'],
                           sd[p + 'attn.qkv.bias']).reshape(
                               B, -1, 3, HEADS,
                               C // HEADS).permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) * (C // HEADS)**-0.5).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(B, -1, C)
        x = x + F.linear(y, sd[p + 'attn.proj.weight'],
                         sd[p + 'attn.proj.bias'])
        y = F.layer_norm(x, (C, ), sd[p + 'norm2.weight'],
                         sd[p + 'norm2.bias'], 1e-6)
        y = F.gelu(
            F.linear(y, sd[p + 'mlp.fc1.weight'], sd[p + 'mlp.fc1.bias']))
        x = x + F.linear(y, sd[p + 'mlp.fc2.weight'], sd[p + 'mlp.fc2.bias'])
    x = F.layer_norm(x, (C, ), sd['norm.weight'], sd['norm.bias'], 1e-6)
    return x[:, 1:].transpose(1, 2).reshape(B, C, h, w)


def run_converter(monkeypatch, *args: str) -> None:
    monkeypatch.setattr(sys, 'argv', ['convert_deit.py', *args])
    runpy.run_path(
        osp.join(ROOT, 'tools', 'model_converters', 'deit2mmseg.py'),
        run_name='__main__')


@pytest.mark.parametrize('cls',
                         [EllipticalVisionTransformer, VisionTransformer])
def test_converted_deit_loads_strictly_and_matches_timm(
        cls, tmp_path, monkeypatch) -> None:
    src = timm_state_dict()
    torch.save({'model': src}, tmp_path / 'deit.pth')
    run_converter(monkeypatch, str(tmp_path / 'deit.pth'),
                  str(tmp_path / 'out' / 'vit.pth'))
    ckpt = load_from_local(str(tmp_path / 'out' / 'vit.pth'))
    assert ckpt['meta']['dropped_keys'] == ['head.bias', 'head.weight']
    kwargs = dict(elliptical_layers=[]) if cls is not VisionTransformer \
        else {}
    model = cls(**ARCH, **kwargs)
    model.load_state_dict(ckpt['state_dict'], strict=True)
    model.eval()
    gen = torch.Generator().manual_seed(1)
    img = torch.randn(2, 3, IMG, IMG, generator=gen)
    with torch.no_grad():
        out = model(img)[-1]
    torch.testing.assert_close(
        out, timm_forward(src, img), atol=1e-5, rtol=1e-5)


def test_converted_values_land_in_mmseg_keys() -> None:
    src = timm_state_dict(distilled=True)
    out, dropped = convert_deit({'model': src})
    assert dropped == sorted([
        'dist_token', 'head.bias', 'head.weight', 'head_dist.bias',
        'head_dist.weight'
    ])
    # The distillation token's position (row 1) is gone, cls + patches stay.
    torch.testing.assert_close(
        out['pos_embed'],
        torch.cat([src['pos_embed'][:, :1], src['pos_embed'][:, 2:]], 1),
        rtol=0,
        atol=0)
    pairs = {
        'cls_token': 'cls_token',
        'patch_embed.projection.weight': 'patch_embed.proj.weight',
        'ln1.weight': 'norm.weight',
        'layers.1.ln1.bias': 'blocks.1.norm1.bias',
        'layers.1.ln2.weight': 'blocks.1.norm2.weight',
        'layers.1.attn.attn.in_proj_weight': 'blocks.1.attn.qkv.weight',
        'layers.1.attn.attn.in_proj_bias': 'blocks.1.attn.qkv.bias',
        'layers.1.attn.attn.out_proj.weight': 'blocks.1.attn.proj.weight',
        'layers.1.ffn.layers.0.0.weight': 'blocks.1.mlp.fc1.weight',
        'layers.1.ffn.layers.1.bias': 'blocks.1.mlp.fc2.bias',
    }
    for new, old in pairs.items():
        assert torch.equal(out[new], src[old]), new
    # Strict into the elliptical backbone (default: elliptical layer 1).
    model = EllipticalVisionTransformer(**ARCH)
    model.load_state_dict(out, strict=True)
    assert model.layers[1].attn.elliptical


def test_converter_rejects_unknown_layout() -> None:
    src = timm_state_dict()
    src['blocks.0.ls1.gamma'] = torch.ones(DIM)  # LayerScale (DeiT III)
    with pytest.raises(ValueError, match=r'layers\.0\.ls1\.gamma'):
        convert_deit(src)
    with pytest.raises(ValueError, match='cls_token and pos_embed'):
        convert_deit({'state_dict': {'conv.weight': torch.ones(1)}})


def test_converter_pickled_training_checkpoint(tmp_path, monkeypatch) -> None:
    # DeiT's training checkpoints pickle their argparse Namespace.
    path = str(tmp_path / 'train_ckpt.pth')
    torch.save({
        'model': timm_state_dict(),
        'args': argparse.Namespace(lr=1.0)
    }, path)
    with pytest.raises(SystemExit, match='--unsafe-pickle'):
        run_converter(monkeypatch, path, str(tmp_path / 'a.pth'))
    run_converter(monkeypatch, path, str(tmp_path / 'b.pth'),
                  '--unsafe-pickle')
    assert 'layers.1.ln2.bias' in load_from_local(str(tmp_path /
                                                      'b.pth'))['state_dict']


def test_converted_checkpoint_as_pretrained(tmp_path, monkeypatch) -> None:
    """``init_cfg=Pretrained`` (what ``model.pretrained`` sets) loads it, with
    mmseg resizing ``pos_embed`` to another input size."""
    src = timm_state_dict()
    torch.save(src, tmp_path / 'vit_timm.pth')
    run_converter(monkeypatch, str(tmp_path / 'vit_timm.pth'),
                  str(tmp_path / 'vit.pth'))
    model = EllipticalVisionTransformer(
        **dict(ARCH, img_size=48),
        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'vit.pth')))
    model.init_weights()
    assert torch.equal(model.layers[1].attn.attn.in_proj_weight,
                       src['blocks.1.attn.qkv.weight'])
    assert model.pos_embed.shape == (1, 1 + 6 * 6, DIM)
    assert torch.equal(model.pos_embed[:, 0], src['pos_embed'][:, 0])


def build_segmentor(path: str, **overrides) -> torch.nn.Module:
    register_all_modules(init_default_scope=True)
    cfg = tiny_config(path, 'unused', 'unused', **overrides)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def test_segmenter_checkpoints_load_strictly_both_ways(tmp_path) -> None:
    dot = build_segmentor(DEMO_DOT)
    ell = build_segmentor(
        DEMO_ELLIPTICAL,
        **{'model.decode_head.type': 'EllipticalMaskTransformerHead'})
    assert type(dot.backbone).__name__ == 'VisionTransformer'
    assert type(dot.decode_head).__name__ == 'SegmenterMaskTransformerHead'
    assert type(ell.decode_head).__name__ == 'EllipticalMaskTransformerHead'
    for src, dst, name in ((dot, ell, 'dot.pth'), (ell, dot, 'ell.pth')):
        with torch.no_grad():
            for p in src.parameters():
                p.add_(torch.randn_like(p))  # differ from dst's init
        save_checkpoint(src.state_dict(), str(tmp_path / name))
        load_checkpoint(dst, str(tmp_path / name), strict=True)
        for (k1, v1), (k2, v2) in zip(src.state_dict().items(),
                                      dst.state_dict().items()):
            assert k1 == k2 and torch.equal(v1, v2)


# ---------------------------------------------------------------------------
# mmengine checkpoints under torch.load(weights_only=True)


@pytest.fixture(scope='module')
def trained(demo_root, tmp_path_factory):
    """A 2-iteration training run of the tiny elliptical demo."""
    work_dir = str(tmp_path_factory.mktemp('ckpt_run'))
    cfg = tiny_config(
        DEMO_ELLIPTICAL, demo_root, work_dir, **{
            'train_cfg.max_iters': 2,
            'experiment_name': 'checkpoints_run'
        })
    Runner.from_cfg(cfg).train()
    cfg_file = osp.join(work_dir, 'tiny.py')
    cfg.dump(cfg_file)
    return cfg_file, osp.join(work_dir, 'iter_2.pth')


def test_mmengine_checkpoint_needs_the_allow_list(trained) -> None:
    _, ckpt = trained
    # Plain torch refuses mmengine's checkpoint: the allow-list is needed...
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer'):
        torch.load(ckpt, weights_only=True)
    # ...and the plugin's loader (mmengine's loader for local files) reads it
    # without leaving the weights-only mode.
    assert CheckpointLoader._schemes[''] is load_from_local
    state = CheckpointLoader.load_checkpoint(ckpt, map_location='cpu')
    assert state['meta']['iter'] == 2
    assert 'message_hub' in state and 'optimizer' in state


# A fresh interpreter: the loader is installed at import, so the switch must
# be read before it.
LOADER_SWITCH = r'''
import json, pickle, sys
from mmengine.runner.checkpoint import CheckpointLoader
import mmseg_elliptical
from mmseg_elliptical.engine import (load_from_local,
                                    register_checkpoint_loader,
                                    unregister_checkpoint_loader)

def state(path):
    try:
        CheckpointLoader.load_checkpoint(path, map_location='cpu')
        loads = True
    except pickle.UnpicklingError:
        loads = False
    return [CheckpointLoader._schemes[''] is load_from_local, loads]

out = {'import': state(sys.argv[1])}
unregister_checkpoint_loader()
out['unregistered'] = state(sys.argv[1])
register_checkpoint_loader()
out['registered'] = state(sys.argv[1])
print(json.dumps(out))
'''


@pytest.mark.parametrize('switch', [None, '0'])
def test_checkpoint_loader_switch(trained, switch) -> None:
    env = dict(os.environ, OMP_NUM_THREADS='1')
    env.pop('MMSEG_ELLIPTICAL_CHECKPOINT_LOADER', None)
    if switch is not None:
        env['MMSEG_ELLIPTICAL_CHECKPOINT_LOADER'] = switch
    proc = run_command([sys.executable, '-c', LOADER_SWITCH, trained[1]],
                       env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    on = switch is None
    # [plugin loader installed, the mmengine checkpoint loads]
    assert out['import'] == [on, on]
    assert out['unregistered'] == [False, False]  # mmengine's own loader
    assert out['registered'] == [on, on]
    logged = proc.stdout.count('weights-only loader that allows mmengine')
    assert logged == (1 if on else 0)  # once, although installed twice


def test_init_model_loads_checkpoint(trained) -> None:
    cfg_file, ckpt = trained
    model = init_model(cfg_file, ckpt, device='cpu')
    weights = load_from_local(ckpt)['state_dict']
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert type(model.backbone).__name__ == 'EllipticalVisionTransformer'


class Payload:
    """Unpickling it would create ``marker`` (runs code at load time)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def test_disallowed_globals_are_refused(tmp_path) -> None:
    marker = str(tmp_path / 'marker')
    evil = str(tmp_path / 'evil.pth')
    torch.save({
        'state_dict': {
            'w': torch.ones(1)
        },
        'x': Payload(marker)
    }, evil)
    custom = str(tmp_path / 'custom.pth')
    torch.save({'state_dict': {}, 'meta': argparse.Namespace(a=1)}, custom)
    for path, name in ((evil, 'open'), (custom, 'argparse.Namespace')):
        with pytest.raises(pickle.UnpicklingError, match=name):
            CheckpointLoader.load_checkpoint(path, map_location='cpu')
        model = torch.nn.Linear(1, 1)
        with pytest.raises(pickle.UnpicklingError, match='Unsupported global'):
            load_checkpoint(model, path)
    assert not osp.exists(marker)
