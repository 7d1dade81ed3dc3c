"""``converters/deit.py`` and ``tools/model_converters/deit2mmseg.py``:
timm / DeiT weights into mmseg's ViT layout, against
``oracles.timm_vit_forward``."""
import argparse
from typing import Dict

import pytest
import torch
from mmseg.models.backbones import VisionTransformer
from oracles import timm_vit_forward
from processes import run_tool_main
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


def run_converter(monkeypatch, *args: str) -> None:
    run_tool_main(monkeypatch, 'model_converters/deit2mmseg.py', *args)


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
        out, timm_vit_forward(src, img, PATCH, HEADS), atol=1e-5, rtol=1e-5)


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


def test_converter_pickled_training_checkpoint(tmp_path, monkeypatch,
                                               capsys) -> None:
    # DeiT's training checkpoints pickle their argparse Namespace.
    path = str(tmp_path / 'train_ckpt.pth')
    torch.save({
        'model': timm_state_dict(),
        'args': argparse.Namespace(lr=1.0)
    }, path)
    with pytest.raises(SystemExit) as stop:
        run_converter(monkeypatch, path, str(tmp_path / 'a.pth'))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and 'rerun with --unsafe-pickle' in err
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
