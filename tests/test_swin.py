"""EllipticalSwinTransformer against an independent windowed oracle.

``naive_window_attention`` below writes Swin's (shifted) window attention out
window by window in image coordinates: zero padding to whole windows, the
cyclic shift as a modular index, the relative position bias from its
textbook formula, the shift mask from the three regions of each axis, and
``m`` from the real tokens' values in image layout. It shares no code with
the package (nor with mmseg's ``ShiftWindowMSA`` beyond its parameters).
"""
import os.path as osp

import pytest
import torch
from conftest import (ROOT, build_pair, check_attention_dropout, check_bf16,
                      check_compiled, check_interchange, check_with_cp,
                      randomise, saved_scores_bytes)
from mmengine.config import Config
from mmengine.structures import PixelData
from mmseg.models.backbones import SwinTransformer
from mmseg.models.backbones.swin import ShiftWindowMSA, WindowMSA
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from test_elliptical_attention import naive_relevance
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mmseg_elliptical.models import (AttentionRecord,
                                     EllipticalSwinTransformer, to_elliptical)
from mmseg_elliptical.models.attention import (EllipticalShiftWindowMSA,
                                               EllipticalWindowMSA)

pytestmark = pytest.mark.usefixtures('single_thread')

C, HEADS, WS = 24, 3, 3
D = C // HEADS
HW = (7, 8)  # padded to 9 x 9: 3 x 3 windows of 3 x 3
L = HW[0] * HW[1]
NW = 9
ARCH = dict(
    embed_dims=16,
    depths=(2, 3),
    num_heads=(2, 4),
    strides=(4, 2),
    out_indices=(0, 1),
    window_size=3,
    mlp_ratio=2)
IMAGE = (40, 56)  # stage 1: 10 x 14 (padded 12 x 15), stage 2: 5 x 7


def naive_window_attention(attn, x, hw, v_prev=None, scale=None):
    """Output of ``ShiftWindowMSA`` and its values ``[B, H, h * w, d]``.

    Args:
        attn: The (elliptical) ``ShiftWindowMSA`` whose parameters are used.
        x (Tensor): Normalised tokens ``[B, h * w, C]``.
        hw (tuple): ``(h, w)``.
        v_prev (Tensor, optional): Previous values in image layout; None:
            dot-product scores.
        scale (float, optional): Score scale; defaults to ``d ** -0.5``.
    """
    w_msa = attn.w_msa
    B, _, C = x.shape
    h, w = hw
    ws, s = attn.window_size, attn.shift_size
    H = w_msa.num_heads
    d = C // H
    scale = d**-0.5 if scale is None else scale
    Hp, Wp = -(-h // ws) * ws, -(-w // ws) * ws
    image = x.new_zeros(B, Hp, Wp, C)
    image[:, :h, :w] = x.view(B, h, w, C)
    weight, bias = w_msa.qkv.weight, w_msa.qkv.bias
    qkv = image @ weight.T + (0 if bias is None else bias)
    q, k, v = (t.reshape(B, Hp, Wp, H, d) for t in qkv.split(C, -1))
    values = v[:, :h, :w].reshape(B, h * w, H, d).transpose(1, 2)
    if v_prev is not None:
        m = naive_relevance(values.detach(), v_prev)  # [B, H, 1, d]
        q = q * m[:, :, 0][:, None, None]
    table = w_msa.relative_position_bias_table

    def region(z, size):  # mmseg's three slices of each axis
        if s == 0 or z < size - ws:
            return 0
        return 1 if z < size - s else 2

    out = torch.zeros_like(q)
    for i in range(Hp // ws):
        for j in range(Wp // ws):
            # tokens of the window in the shifted frame, and where they are
            # in the padded image (the cyclic shift moves them by -s)
            frame = [(i * ws + a, j * ws + b) for a in range(ws)
                     for b in range(ws)]
            rows = torch.tensor([(r + s) % Hp for r, _ in frame])
            cols = torch.tensor([(c + s) % Wp for _, c in frame])
            rel = torch.tensor([[
                (r1 - r2 + ws - 1) * (2 * ws - 1) + (c1 - c2 + ws - 1)
                for r2, c2 in frame
            ] for r1, c1 in frame])
            score_bias = table[rel].permute(2, 0, 1)  # [H, T, T]
            groups = [region(r, Hp) * 3 + region(c, Wp) for r, c in frame]
            mask = torch.tensor([[0. if g1 == g2 else -100. for g2 in groups]
                                 for g1 in groups])
            qw, kw, vw = (t[:, rows, cols] for t in (q, k, v))  # [B,T,H,d]
            scores = torch.einsum('bthd,buhd->bhtu', qw, kw) * scale
            probs = (scores + score_bias + mask).softmax(-1)
            out[:, rows, cols] = torch.einsum('bhtu,buhd->bthd', probs, vw)
    out = out[:, :h, :w].reshape(B, h * w, C)
    return w_msa.proj(out), values


def build_attention(shift=1, qkv_bias=True, qk_scale=None, **kwargs):
    torch.manual_seed(0)
    attn = EllipticalShiftWindowMSA(
        C,
        HEADS,
        WS,
        shift_size=shift,
        qkv_bias=qkv_bias,
        qk_scale=qk_scale,
        **kwargs)
    with torch.no_grad():  # a bias that matters
        attn.w_msa.relative_position_bias_table.normal_()
        if qkv_bias:
            attn.w_msa.qkv.bias.normal_()
    return attn.eval()


def call(attn, x, v_prev=None, hw=HW):
    with attn.chained(v_prev, keep=True) as chain_call:
        out = attn(x, hw)
    return out, chain_call.values


@pytest.mark.parametrize('shift', [0, 1])
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('batch', [1, 2])
@pytest.mark.parametrize('qkv_bias', [True, False])
def test_window_attention_matches_naive(shift, fused, grad, batch, qkv_bias):
    attn = build_attention(shift, qkv_bias)
    attn.fused_attn = fused
    x = torch.randn(batch, HW[0] * HW[1], C)
    v_prev = torch.randn(batch, HEADS, HW[0] * HW[1], D)
    with torch.set_grad_enabled(grad):
        out, v = call(attn, x, v_prev)
        ref, ref_v = naive_window_attention(attn, x, HW, v_prev)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)
        assert not v.requires_grad
        # Without previous values: dot-product attention, values handed on.
        out, v = call(attn, x)
        torch.testing.assert_close(
            out, naive_window_attention(attn, x, HW)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)


@pytest.mark.parametrize('fused', [True, False])
def test_qk_scale_is_honoured(fused):
    attn = build_attention(qk_scale=0.05)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    with torch.no_grad():
        torch.testing.assert_close(
            call(attn, x, v_prev)[0],
            naive_window_attention(attn, x, HW, v_prev, scale=0.05)[0],
            atol=1e-5,
            rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_attention_dropout_in_train_mode_only(fused):
    attn = build_attention(attn_drop_rate=0.5)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    check_attention_dropout(attn, lambda: call(attn, x, v_prev)[0],
                            naive_window_attention(attn, x, HW, v_prev)[0])


@pytest.mark.parametrize('fused', [True, False])
def test_gradients_match_naive_and_m_is_constant(fused):
    attn = build_attention().train()
    attn.fused_attn = fused
    x = torch.randn(2, L, C, requires_grad=True)
    v_prev = torch.randn(2, HEADS, L, D, requires_grad=True)
    out, _ = call(attn, x, v_prev)
    out.square().sum().backward()
    assert v_prev.grad is None
    got = {n: p.grad.clone() for n, p in attn.named_parameters()}
    got_x = x.grad.clone()
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    naive_window_attention(attn, x2, HW,
                           v_prev.detach())[0].square().sum().backward()
    assert set(got) == {
        'w_msa.relative_position_bias_table', 'w_msa.qkv.weight',
        'w_msa.qkv.bias', 'w_msa.proj.weight', 'w_msa.proj.bias'
    }
    for name, p in attn.named_parameters():
        torch.testing.assert_close(
            got[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(got_x, x2.grad, atol=1e-4, rtol=1e-4)


def test_dot_product_mode_equals_mmseg_module():
    torch.manual_seed(0)
    ref = ShiftWindowMSA(C, HEADS, WS, shift_size=1).eval()
    with torch.no_grad():
        ref.w_msa.relative_position_bias_table.normal_()
    x = torch.randn(2, L, C)
    expected = ref(x, HW)
    attn = to_elliptical(ref)
    assert type(attn) is EllipticalShiftWindowMSA
    assert type(attn.w_msa) is EllipticalWindowMSA
    torch.testing.assert_close(attn(x, HW), expected, atol=1e-5, rtol=1e-5)
    # The windows are routed back only during a call, also one that fails.
    assert attn.w_msa.window_call is None
    with pytest.raises(AssertionError, match='input feature has wrong size'):
        attn(x, (5, 5))
    assert attn.w_msa.window_call is None
    # w_msa called on its own is mmseg's WindowMSA.
    windows = torch.randn(4, WS * WS, C)
    torch.testing.assert_close(
        attn.w_msa(windows), WindowMSA.forward(attn.w_msa, windows))


def test_explicit_probabilities_are_recorded_per_window():
    attn = build_attention()
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    attn.fused_attn = False
    attn.attention_record = AttentionRecord()
    with torch.no_grad():
        call(attn, x, v_prev)
    probs, = attn.attention_record.probs
    m, = attn.attention_record.relevance
    assert probs.shape == (2 * NW, HEADS, WS * WS, WS * WS)
    assert m.shape == (2, HEADS, 1, D)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2 * NW, HEADS, 9))


def test_conversion_checks_w_msa_type():

    class MyWindowMSA(WindowMSA):
        pass

    attn = ShiftWindowMSA(C, HEADS, WS)
    attn.w_msa = MyWindowMSA(C, HEADS, (WS, WS))
    with pytest.raises(TypeError, match='supports mmseg.s WindowMSA exactly'):
        to_elliptical(attn)
    assert type(attn) is ShiftWindowMSA  # nothing half-converted


# ---------------------------------------------------------------------------
# The backbone


def naive_forward(model, x):
    """The method written out stage by stage and block by block."""
    tokens, hw = model.patch_embed(x)
    if model.use_abs_pos_embed:
        tokens = tokens + model.absolute_pos_embed.flatten(2).transpose(1, 2)
    outs, index = [], 0
    for i, stage in enumerate(model.stages):
        v_prev = None
        for block in stage.blocks:
            elliptical = index in model.elliptical_layers
            a, v_prev = naive_window_attention(block.attn, block.norm1(tokens),
                                               hw,
                                               v_prev if elliptical else None)
            tokens = tokens + a
            tokens = block.ffn(block.norm2(tokens), identity=tokens)
            index += 1
        out, out_hw = tokens, hw
        if stage.downsample is not None:
            tokens, hw = stage.downsample(tokens, hw)
        if i in model.out_indices:
            out = getattr(model, f'norm{i}')(out)
            outs.append(out.view(x.shape[0], *out_hw, -1).permute(0, 3, 1, 2))
    return outs


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(qkv_bias=False, qk_scale=0.1, out_indices=(1, )),
    dict(use_abs_pos_embed=True, pretrain_img_size=IMAGE, patch_norm=False),
    dict(frozen_stages=1),
])
def test_dot_product_mode_equals_mmseg(kwargs):
    ref, ours = build_pair(SwinTransformer, EllipticalSwinTransformer,
                           **dict(ARCH, **kwargs))
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    randomise(ref)
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    x = torch.randn(2, 3, *IMAGE)
    outs = ours(x)
    assert len(outs) == len(ref(x))
    for a, b in zip(ref(x), outs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_layers_and_chains():
    model = EllipticalSwinTransformer(**ARCH)
    assert model.elliptical_layers == (1, 3, 4)
    assert [[b.attn.elliptical for b in s.blocks]
            for s in model.stages] == [[False, True], [False, True, True]]
    assert [[b.attn.shift_size for b in s.blocks]
            for s in model.stages] == [[0, 1], [0, 1, 0]]
    chains = [s.blocks[0].value_chain for s in model.stages]
    assert len({id(c) for c in chains}) == 2
    assert [len(c) for c in chains] == [2, 3]


@pytest.mark.parametrize('layers', [None, [3], [1, 4]])
@pytest.mark.parametrize('size', [IMAGE, (32, 32)])
def test_elliptical_forward_matches_naive(layers, size):
    """Stages with padding (10 x 14 and 5 x 7 maps, windows of 3) and shifted
    blocks between unshifted ones; and a map of whole windows."""
    torch.manual_seed(0)
    model = EllipticalSwinTransformer(elliptical_layers=layers, **ARCH)
    model.init_weights()
    randomise(model)
    model.eval()
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        outs = model(x)
        for a, b in zip(outs, naive_forward(model, x)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        ref = SwinTransformer(**ARCH)
        ref.load_state_dict(model.state_dict())
        ref.eval()
        assert not torch.allclose(outs[-1], ref(x)[-1], atol=1e-3)


def test_torch_compile_matches_eager():
    torch.manual_seed(0)
    model = EllipticalSwinTransformer(
        **dict(ARCH, depths=(2, 2), drop_path_rate=0.0))
    randomise(model)
    check_compiled(model, torch.randn(2, 3, *IMAGE))


def test_checkpoints_load_both_ways_strictly():
    torch.manual_seed(0)
    check_interchange(
        SwinTransformer(**ARCH), EllipticalSwinTransformer(**ARCH))


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(elliptical_layers=[2]), ValueError,
     r'first layer of each stage \(\[0, 2\]\)'),
    (dict(elliptical_layers=[5]), ValueError, r'among \[1, 3, 4\]'),
    (dict(relevance_reduction='max'), ValueError, 'relevance_reduction'),
    (dict(relevance_eps=-1), ValueError, 'relevance_eps'),
    (dict(window_sizee=7), TypeError,
     "EllipticalSwinTransformer got an unexpected keyword argument "
     "'window_sizee'; did you mean 'window_size'"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        EllipticalSwinTransformer(**dict(ARCH, **kwargs))


def test_bad_inputs():
    model = EllipticalSwinTransformer(**ARCH)
    with pytest.raises(ValueError, match=r'float batch of images \[B, C, H'):
        model(torch.zeros(3, 32, 32))
    with pytest.raises(ValueError, match='dtype torch.uint8'):
        model(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))


@pytest.mark.parametrize('case', ['zeros', 'large', 'constant', 'no_change'])
@pytest.mark.parametrize('train', [False, True])
def test_degenerate_inputs_stay_finite(case, train):
    torch.manual_seed(0)
    model = EllipticalSwinTransformer(**ARCH)
    model.init_weights()
    model.train(train)
    fill = dict(zeros=0., large=1e4).get(case, 0.5)
    x = torch.full((2, 3, *IMAGE), fill)
    if case == 'no_change':  # v = 0 in every block: m has no evidence
        x = torch.randn(2, 3, *IMAGE)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if 'qkv' in name:
                    p.zero_()
    outs = model(x)
    assert all(torch.isfinite(o).all() for o in outs)
    if train:
        sum(o.square().mean() for o in outs).backward()
        assert all(
            torch.isfinite(p.grad).all() for p in model.parameters()
            if p.grad is not None)


@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('how', ['autocast', 'bf16_model'])
def test_bf16(fused, how):
    """Under CPU bf16 autocast (forward and backward) and as a bf16 model
    (``model.bfloat16()``): finite, and close to fp32."""
    torch.manual_seed(0)
    model = EllipticalSwinTransformer(**ARCH)
    model.init_weights()
    randomise(model)
    for module in model.modules():
        if isinstance(module, EllipticalShiftWindowMSA):
            module.fused_attn = fused
    model.eval()  # no stochastic depth: fp32 and bf16 see the same model
    check_bf16(model, torch.randn(2, 3, *IMAGE), how)


def test_with_cp_saves_less_and_gives_the_same_gradients():

    def build(with_cp):
        torch.manual_seed(0)
        model = EllipticalSwinTransformer(with_cp=with_cp, **ARCH)
        model.init_weights()
        return model.train()

    check_with_cp(build, torch.randn(2, 3, *IMAGE))


class ShapeSpy(TorchDispatchMode):
    """Records the aten ops that run and the shapes of what they return."""

    def __init__(self):
        super().__init__()
        self.shapes, self.ops = [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        self.shapes += [
            tuple(t.shape) for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor)
        ]
        return out

    def fused(self) -> bool:
        """Whether attention ran in SDPA's flash kernel only (its math
        fallback would run a softmax)."""
        return ('aten._scaled_dot_product_flash_attention_for_cpu' in self.ops
                and 'aten._softmax' not in self.ops)


def window_square_tensors(shapes, rows, heads, T):
    """Shapes ``[..., T, T]`` with as many elements as ``[rows, H, T, T]``."""
    return [
        s for s in shapes
        if s[-2:] == (T, T) and torch.Size(s).numel() >= rows * heads * T * T
    ]


@pytest.mark.parametrize('batch', [1, 2])
@pytest.mark.parametrize('shift', [0, 1])
def test_fused_inference_materialises_no_window_scores(batch, shift):
    """mmseg's WindowMSA builds [B * nW, H, Wt, Wt] scores; the fused
    elliptical path under no-grad (with padding) runs SDPA's flash kernel
    and builds no window x window tensor larger than the bias: [1, H, Wt,
    Wt], or one window row's [gw, H, Wt, Wt] in a shifted block."""
    torch.manual_seed(0)
    ref = ShiftWindowMSA(C, HEADS, WS, shift_size=shift).eval()
    ours = build_attention(shift=shift)
    x, v_prev = torch.randn(batch, L, C), torch.randn(batch, HEADS, L, D)
    T = WS * WS
    with torch.no_grad():
        with ShapeSpy() as spy:
            ref(x, HW)
        assert window_square_tensors(spy.shapes, batch * NW, HEADS, T)
        assert not spy.fused()
        for v in (v_prev, None):  # elliptical and dot-product scores
            with ShapeSpy() as spy:
                call(ours, x, v)
            assert spy.fused()
            assert max(
                torch.Size(s).numel() for s in spy.shapes
                if s[-2:] == (T, T)) == (3 if shift else 1) * HEADS * T * T
        ours.fused_attn = False  # the paper's formulation materialises them
        with ShapeSpy() as spy:
            call(ours, x, v_prev)
        assert window_square_tensors(spy.shapes, batch * NW, HEADS, T)


def test_training_saves_no_more_window_scores_than_mmseg():
    """In training the bias needs a gradient, so SDPA runs its math kernel,
    which keeps window x window scores for the backward as mmseg's WindowMSA
    does: no more of them (by bytes) than mmseg, elliptical or not."""
    x = torch.randn(2, 3, *IMAGE)
    T = ARCH['window_size']**2
    saved = {}
    for name, cls, kwargs in (('mmseg', SwinTransformer, {}),
                              ('elliptical', EllipticalSwinTransformer,
                               {}), ('dot-product', EllipticalSwinTransformer,
                                     dict(elliptical_layers=[]))):
        torch.manual_seed(0)
        saved[name] = saved_scores_bytes(cls(**ARCH, **kwargs), x, T)
    assert saved['mmseg'] > 0
    assert saved['elliptical'] <= saved['mmseg'], saved
    assert saved['dot-product'] <= saved['mmseg'], saved


# ---------------------------------------------------------------------------
# Configs

SWIN_CONFIGS = [
    osp.join(
        ROOT, 'configs', 'swin', f'elliptical-swin-{size}-patch4-'
        'window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py')
    for size in ('tiny', 'small', 'base')
]


def bn(cfg):
    """SyncBN -> BN everywhere in a (nested) config."""
    if isinstance(cfg, dict):
        if cfg.get('type') == 'SyncBN':
            cfg['type'] = 'BN'
        for v in cfg.values():
            bn(v)
    elif isinstance(cfg, (list, tuple)):
        for v in cfg:
            bn(v)
    return cfg


def tiny_train_step(path, options, size=64, check=None):
    """Build a config's model shrunk by ``options``, run the loss on two
    random images and backpropagate; return the model and the losses."""
    cfg = Config.fromfile(path)
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None  # no download
    cfg.merge_from_dict(options)
    bn(cfg.model)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    num_classes = cfg.model.decode_head.num_classes
    samples = []
    for i in range(2):
        sample = SegDataSample(
            metainfo=dict(
                img_shape=(size, size),
                pad_shape=(size, size),
                ori_shape=(size, size)))
        sample.gt_sem_seg = PixelData(
            data=torch.randint(
                0,
                num_classes, (1, size, size),
                generator=torch.Generator().manual_seed(i)))
        samples.append(sample)
    torch.manual_seed(0)
    inputs = torch.randn(2, 3, size, size)
    losses = model(inputs, samples, mode='loss')
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    params = dict(model.backbone.named_parameters())
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in params.values() if p.requires_grad)
    return cfg, model, losses


@pytest.mark.parametrize('path', SWIN_CONFIGS)
def test_config_forward_loss_backward(path):
    cfg = Config.fromfile(path)
    embed = cfg.model.backbone.embed_dims // 4  # heads keep their number
    widths = [embed * 2**i for i in range(4)]
    _, model, losses = tiny_train_step(
        path, {
            'model.backbone.embed_dims': embed,
            'model.decode_head.in_channels': widths,
            'model.decode_head.channels': 16,
            'model.auxiliary_head.in_channels': widths[2],
            'model.auxiliary_head.channels': 16,
        })
    assert type(model.backbone) is EllipticalSwinTransformer
    depths = cfg.model.backbone.depths
    assert len(model.backbone.elliptical_layers) == sum(depths) - 4
    assert {'decode.loss_ce', 'aux.loss_ce'} <= set(losses)
