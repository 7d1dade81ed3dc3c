"""EllipticalBEiT and EllipticalMAE against an independent oracle.

``naive_attention`` writes BEiT's attention out: its qkv bias (``q_bias``,
a zero key bias and ``v_bias``; MAE's plain bias; or none), the relative
position bias from its textbook formula with the three cls entries, the
score scale, and ``m`` from ``naive_relevance``. It shares no code with the
package nor with mmseg's forward.
"""
import os.path as osp

import pytest
import torch
from conftest import (ROOT, build_pair, check_attention_dropout, check_bf16,
                      check_compiled, check_interchange, randomise,
                      saved_scores_bytes)
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmseg.models.backbones import MAE, BEiT
from mmseg.models.backbones.beit import BEiTAttention
from mmseg.models.backbones.mae import MAEAttention
from test_elliptical_attention import naive_relevance
from test_swin import ShapeSpy, tiny_train_step

from mmseg_elliptical.models import (AttentionRecord, EllipticalBEiT,
                                     EllipticalBEiTAttention, EllipticalMAE,
                                     EllipticalMAEAttention, to_elliptical)

pytestmark = pytest.mark.usefixtures('single_thread')

C, HEADS, GRID = 24, 3, (3, 4)
D = C // HEADS
N = GRID[0] * GRID[1] + 1
ARCH = dict(
    img_size=(32, 24),
    patch_size=8,
    embed_dims=24,
    num_heads=3,
    num_layers=4,
    mlp_ratio=2,
    out_indices=(1, 3))
BACKBONES = {'beit': (BEiT, EllipticalBEiT), 'mae': (MAE, EllipticalMAE)}


def relative_index(grid):
    """BEiT's relative position index, cls token first."""
    Wh, Ww = grid
    L = (2 * Wh - 1) * (2 * Ww - 1) + 3
    pos = [divmod(i, Ww) for i in range(Wh * Ww)]
    index = torch.empty(Wh * Ww + 1, Wh * Ww + 1, dtype=torch.long)
    index[0, 0], index[0, 1:], index[1:, 0] = L - 1, L - 3, L - 2
    for i, (r1, c1) in enumerate(pos):
        for j, (r2, c2) in enumerate(pos):
            index[i + 1, j + 1] = (r1 - r2 + Wh - 1) * (2 * Ww - 1) + (
                c1 - c2 + Ww - 1)
    return index


def naive_attention(attn, x, v_prev=None, scale=None, grid=GRID):
    """Output of ``BEiTAttention`` (before the layer scale) and its values."""
    B, n, C = x.shape
    H = attn.num_heads
    d = C // H
    weight = attn.qkv.weight
    if attn.bias == 'qv_bias':
        bias = torch.cat((attn.q_bias, torch.zeros(C), attn.v_bias))
    elif attn.qkv.bias is not None:
        bias = attn.qkv.bias
    else:
        bias = torch.zeros(3 * C)
    q, k, v = ((x @ weight[i * C:(i + 1) * C].T +
                bias[i * C:(i + 1) * C]).reshape(B, n, H, d).transpose(1, 2)
               for i in range(3))
    if v_prev is not None:
        q = q @ torch.diag_embed(naive_relevance(v.detach(), v_prev)[:, :, 0])
    scale = d**-0.5 if scale is None else scale
    table = attn.relative_position_bias_table
    rel = table[relative_index(grid)].permute(2, 0, 1)  # [H, N, N]
    probs = (q @ k.transpose(-2, -1) * scale + rel).softmax(-1)
    out = (probs @ v).transpose(1, 2).reshape(B, n, C)
    return attn.proj(out), v


KINDS = {
    'beit':
    lambda **kw: EllipticalBEiTAttention(C, HEADS, GRID, **kw),
    'beit-no-bias':
    lambda **kw: EllipticalBEiTAttention(C, HEADS, GRID, bias=False, **kw),
    'mae':
    lambda **kw: EllipticalMAEAttention(C, HEADS, GRID, bias=True, **kw),
}


def build_attention(kind='beit', **kwargs):
    torch.manual_seed(0)
    attn = KINDS[kind](**kwargs)
    with torch.no_grad():  # biases that matter
        for name, p in attn.named_parameters():
            if 'bias' in name:
                p.normal_()
    return attn.eval()


def call(attn, x, v_prev=None):
    with attn.chained(v_prev, keep=True) as chain_call:
        out = attn(x)
    return out, chain_call.values


@pytest.mark.parametrize('kind', sorted(KINDS))
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('batch', [1, 2])
def test_attention_matches_naive(kind, fused, grad, batch):
    attn = build_attention(kind)
    attn.fused_attn = fused
    x = torch.randn(batch, N, C)
    v_prev = torch.randn(batch, HEADS, N, D)
    with torch.set_grad_enabled(grad):
        out, v = call(attn, x, v_prev)
        ref, ref_v = naive_attention(attn, x, v_prev)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)
        assert not v.requires_grad
        out, v = call(attn, x)
        torch.testing.assert_close(
            out, naive_attention(attn, x)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_qk_scale_is_honoured(fused):
    attn = build_attention(qk_scale=0.05)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    with torch.no_grad():
        torch.testing.assert_close(
            call(attn, x, v_prev)[0],
            naive_attention(attn, x, v_prev, scale=0.05)[0],
            atol=1e-5,
            rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_attention_dropout_in_train_mode_only(fused):
    attn = build_attention(attn_drop_rate=0.5)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    check_attention_dropout(attn, lambda: call(attn, x, v_prev)[0],
                            naive_attention(attn, x, v_prev)[0])


@pytest.mark.parametrize('kind', ['beit', 'mae'])
@pytest.mark.parametrize('fused', [True, False])
def test_gradients_match_naive_and_m_is_constant(kind, fused):
    attn = build_attention(kind).train()
    attn.fused_attn = fused
    x = torch.randn(2, N, C, requires_grad=True)
    v_prev = torch.randn(2, HEADS, N, D, requires_grad=True)
    call(attn, x, v_prev)[0].square().sum().backward()
    assert v_prev.grad is None
    got = {n: p.grad.clone() for n, p in attn.named_parameters()}
    got_x = x.grad.clone()
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    naive_attention(attn, x2, v_prev.detach())[0].square().sum().backward()
    expected = {
        'relative_position_bias_table', 'qkv.weight', 'proj.weight',
        'proj.bias'
    }
    expected |= {'q_bias', 'v_bias'} if kind == 'beit' else {'qkv.bias'}
    assert set(got) == expected
    for name, p in attn.named_parameters():
        torch.testing.assert_close(
            got[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(got_x, x2.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('cls, expected', [
    (BEiTAttention, EllipticalBEiTAttention),
    (MAEAttention, EllipticalMAEAttention),
])
def test_dot_product_mode_equals_mmseg_module(cls, expected):
    torch.manual_seed(0)
    ref = cls(
        C, HEADS, GRID,
        bias='qv_bias' if cls is BEiTAttention else True).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if 'bias' in name:
                p.normal_()
    x = torch.randn(2, N, C)
    out = ref(x)
    attn = to_elliptical(ref)
    assert type(attn) is expected
    torch.testing.assert_close(attn(x), out, atol=1e-5, rtol=1e-5)


def test_explicit_probabilities_give_the_fused_output():
    attn = build_attention()
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    with torch.no_grad():
        fused, v = call(attn, x, v_prev)
        attn.fused_attn = False
        attn.attention_record = AttentionRecord()
        call(attn, x, v_prev)
    probs, = attn.attention_record.probs
    assert probs.shape == (2, HEADS, N, N)
    out = (probs @ v).transpose(1, 2).reshape(2, N, C)
    torch.testing.assert_close(attn.proj(out), fused, atol=1e-5, rtol=1e-5)


def test_fused_inference_materialises_no_scores():
    """mmseg's BEiTAttention builds [B, H, N, N] scores; the fused path under
    no-grad builds nothing larger than the [1, H, N, N] bias."""
    torch.manual_seed(0)
    ref = BEiTAttention(C, HEADS, GRID).eval()
    ours = build_attention()
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)

    def squares(shapes):
        return [s for s in shapes if s[-2:] == (N, N)]

    with torch.no_grad():
        with ShapeSpy() as spy:
            ref(x)
        assert (2, HEADS, N, N) in squares(spy.shapes)
        for v in (v_prev, None):
            with ShapeSpy() as spy:
                call(ours, x, v)
            assert spy.fused()
            assert max(torch.Size(s).numel()
                       for s in squares(spy.shapes)) == HEADS * N * N


# ---------------------------------------------------------------------------
# The backbones


def naive_forward(model, x):
    """BEiT / MAE written out layer by layer (layer scale included)."""
    tokens, hw = model.patch_embed(x)
    cls_token = model.cls_token.expand(x.shape[0], -1, -1)
    tokens = torch.cat((cls_token, tokens), 1)
    if isinstance(model, MAE):
        tokens = tokens + model.pos_embed
    outs, v_prev = [], None
    for i, layer in enumerate(model.layers):
        a, v = naive_attention(
            layer.attn,
            layer.norm1(tokens),
            v_prev if i in model.elliptical_layers else None,
            grid=hw)
        tokens = tokens + layer.gamma_1 * a
        tokens = tokens + layer.gamma_2 * layer.ffn(layer.norm2(tokens))
        v_prev = v
        if i == len(model.layers) - 1 and model.final_norm:
            tokens = model.norm1(tokens)
        if i in model.out_indices:
            outs.append(tokens[:, 1:].reshape(x.shape[0], *hw,
                                              -1).permute(0, 3, 1, 2))
    return outs


@pytest.mark.parametrize('kind', sorted(BACKBONES))
@pytest.mark.parametrize(
    'kwargs', [
        dict(),
        dict(final_norm=True, out_indices=-1, init_values=1.0),
        dict(qv_bias=False, patch_norm=True),
    ],
    ids=['default', 'final_norm', 'no_qv_bias'])
def test_dot_product_mode_equals_mmseg(kind, kwargs):
    if kind == 'mae':
        kwargs.pop('qv_bias', None)  # MAE always has a plain qkv bias
    ref, ours = build_pair(*BACKBONES[kind], **dict(ARCH, **kwargs))
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    randomise(ref)
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    x = torch.randn(2, 3, 32, 24)
    outs = ours(x)
    assert len(outs) == len(ref(x))
    for a, b in zip(ref(x), outs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
@pytest.mark.parametrize('layers', [None, [2, 3]])
def test_elliptical_forward_matches_naive(kind, layers):
    ref_cls, cls = BACKBONES[kind]
    torch.manual_seed(0)
    model = cls(elliptical_layers=layers, final_norm=True, **ARCH)
    model.init_weights()
    randomise(model)
    model.eval()
    assert model.elliptical_layers == (tuple(layers) if layers else (1, 2, 3))
    x = torch.randn(2, 3, 32, 24)
    with torch.no_grad():
        outs = model(x)
        for a, b in zip(outs, naive_forward(model, x)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        ref = ref_cls(final_norm=True, **ARCH)
        ref.load_state_dict(model.state_dict())
        ref.eval()
        assert not torch.allclose(outs[-1], ref(x)[-1], atol=1e-3)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
def test_torch_compile_matches_eager(kind):
    torch.manual_seed(0)
    model = BACKBONES[kind][1](final_norm=True, **ARCH)
    randomise(model)
    check_compiled(model, torch.randn(2, 3, 32, 24))


@pytest.mark.parametrize('kind', sorted(BACKBONES))
def test_checkpoints_load_both_ways_strictly(kind):
    ref_cls, cls = BACKBONES[kind]
    torch.manual_seed(0)
    check_interchange(ref_cls(**ARCH), cls(**ARCH))


@pytest.mark.parametrize('kind', sorted(BACKBONES))
@pytest.mark.parametrize('kwargs, error, match', [
    (dict(elliptical_layers=[0, 1]), ValueError, 'layer 0 has no previous'),
    (dict(elliptical_layers=[4]), ValueError, r'integers in 1\.\.3'),
    (dict(relevance_reduction='max'), ValueError, 'relevance_reduction'),
    (dict(num_layerss=2), TypeError, "did you mean 'num_layers'"),
    (dict(with_cp=True), TypeError, "unexpected keyword argument 'with_cp'"),
])
def test_bad_arguments(kind, kwargs, error, match):
    cls = BACKBONES[kind][1]
    with pytest.raises(error, match=match) as info:
        cls(**dict(ARCH, **kwargs))
    if error is TypeError:
        assert cls.__name__ in str(info.value)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
def test_bad_inputs(kind):
    cls = BACKBONES[kind][1]
    model = cls(**ARCH).eval()
    with pytest.raises(ValueError, match=r'float batch of images'):
        model(torch.zeros(3, 32, 24))
    # Same number of patches (12), other grid: mmseg's BEiT would silently
    # use wrong relative positions.
    with pytest.raises(
            ValueError,
            match=(
                rf'{cls.__name__} was built for img_size=\(32, 24\) \(a 4x3 '
                r'patch grid.*got images of \(24, 32\) \(3x4 patches\); set '
                'img_size to the crop size')):
        model(torch.zeros(1, 3, 24, 32))
    assert model(torch.zeros(1, 3, 39, 31))[0].shape == (1, 24, 4, 3)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
@pytest.mark.parametrize('case', ['zeros', 'large', 'constant', 'no_change'])
def test_degenerate_inputs_stay_finite(kind, case):
    torch.manual_seed(0)
    model = BACKBONES[kind][1](**ARCH)
    model.init_weights()
    model.train()
    fill = dict(zeros=0., large=1e4).get(case, 0.5)
    x = torch.full((2, 3, 32, 24), fill)
    if case == 'no_change':  # v = 0 in every layer: m has no evidence
        x = torch.randn(2, 3, 32, 24)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if 'qkv' in name or name.endswith(('q_bias', 'v_bias')):
                    p.zero_()
    for train in (True, False):
        model.train(train)
        with torch.set_grad_enabled(train):
            outs = model(x)
        assert all(torch.isfinite(o).all() for o in outs)
    sum(o.square().mean() for o in model.train()(x)).backward()
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('how', ['autocast', 'bf16_model'])
def test_bf16(kind, fused, how):
    """Under CPU bf16 autocast (forward and backward) and as a bf16 model
    (``model.bfloat16()``): finite, and close to fp32."""
    torch.manual_seed(0)
    model = BACKBONES[kind][1](**ARCH)
    model.init_weights()
    randomise(model)
    for layer in model.layers:
        layer.attn.fused_attn = fused
    model.eval()
    check_bf16(model, torch.randn(2, 3, 32, 24), how)


@pytest.mark.parametrize('kind', sorted(BACKBONES))
def test_training_saves_no_more_scores_than_mmseg(kind):
    """In training the bias needs a gradient, so SDPA runs its math kernel,
    which keeps N x N scores for the backward as mmseg does: no more."""
    x = torch.randn(2, 3, 32, 24)
    ref_cls, cls = BACKBONES[kind]
    saved = {}
    for name, build in (('mmseg', lambda: ref_cls(**ARCH)),
                        ('elliptical', lambda: cls(**ARCH)),
                        ('dot-product',
                         lambda: cls(elliptical_layers=[], **ARCH))):
        torch.manual_seed(0)
        saved[name] = saved_scores_bytes(build(), x, N)
    assert saved['mmseg'] > 0
    assert saved['elliptical'] <= saved['mmseg'], saved
    assert saved['dot-product'] <= saved['mmseg'], saved


# ---------------------------------------------------------------------------
# Configs

CONFIGS = {
    'beit':
    osp.join(ROOT, 'configs', 'beit', 'elliptical-beit-base_upernet_'
             '8xb2-160k_ade20k-640x640.py'),
    'mae':
    osp.join(ROOT, 'configs', 'mae', 'elliptical-mae-base_upernet_'
             '8xb2-amp-160k_ade20k-512x512.py'),
}


@pytest.mark.parametrize('kind', sorted(CONFIGS))
def test_config_forward_loss_backward(kind):
    """Shrunk to 48 channels and 64 x 64 images (12 layers kept); the layer
    decay optimiser of the configs recognises the elliptical backbones."""
    width = 48
    cfg, model, losses = tiny_train_step(
        CONFIGS[kind], {
            'model.backbone.img_size': (64, 64),
            'model.backbone.embed_dims': width,
            'model.backbone.num_heads': 4,
            'model.neck.embed_dim': width,
            'model.decode_head.in_channels': [width] * 4,
            'model.decode_head.channels': 16,
            'model.auxiliary_head.in_channels': width,
            'model.auxiliary_head.channels': 16,
        })
    assert type(model.backbone) is BACKBONES[kind][1]
    assert model.backbone.elliptical_layers == tuple(range(1, 12))
    assert {'decode.loss_ce', 'aux.loss_ce'} <= set(losses)
    with DefaultScope.overwrite_default_scope('mmseg'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    scales = {g['lr_scale'] for g in optim.optimizer.param_groups}
    assert len(scales) == 12 + 2  # one per layer, the embedding, the heads
