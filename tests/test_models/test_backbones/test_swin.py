"""``backbones/swin.py``: EllipticalSwinTransformer against mmseg's class
and ``oracles.naive_swin_forward``; paths, numerics, memory, compile."""
import pytest
import torch
import torch.nn.functional as F
from builders import randomise, set_fused, zero_values
from checks import (check_bf16, check_compiled, check_dot_product_equals_mmseg,
                    check_finite_forward_backward, check_interchange,
                    check_matches_naive, check_saves_no_more_scores_than_mmseg,
                    check_with_cp, grads, outputs_loss)
from mmseg.models.backbones import SwinTransformer
from oracles import naive_swin_forward

from mmseg_elliptical.models import EllipticalSwinTransformer
from mmseg_elliptical.models.attention import policy

pytestmark = pytest.mark.usefixtures('single_thread')

ARCH = dict(
    embed_dims=16,
    depths=(2, 3),
    num_heads=(2, 4),
    strides=(4, 2),
    out_indices=(0, 1),
    window_size=3,
    mlp_ratio=2)
IMAGE = (40, 56)  # stage 1: 10 x 14 (padded 12 x 15), stage 2: 5 x 7
FILL = dict(zeros=0., large=1e4, constant=0.5, no_change=None)


def build(**kwargs):
    torch.manual_seed(0)
    model = EllipticalSwinTransformer(**dict(ARCH, **kwargs))
    model.init_weights()
    return model


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(qkv_bias=False, qk_scale=0.1, out_indices=(1, )),
    dict(use_abs_pos_embed=True, pretrain_img_size=IMAGE, patch_norm=False),
    dict(frozen_stages=1),
])
def test_dot_product_mode_equals_mmseg(kwargs):
    check_dot_product_equals_mmseg(
        SwinTransformer,
        EllipticalSwinTransformer,
        torch.randn(2, 3, *IMAGE),
        randomised=True,
        **dict(ARCH, **kwargs))


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
    model = build(elliptical_layers=layers)
    randomise(model)
    check_matches_naive(model, naive_swin_forward, SwinTransformer(**ARCH),
                        torch.randn(2, 3, *size))


def test_output_and_gradients_whichever_path_runs(monkeypatch):
    """The blocks' output (and in training the gradients) is the same on
    every path: fused (SDPA, one window row per call) and explicit (the
    shift mask through ``attend_with_window_mask``), without grad and in
    training, where the CPU picks the explicit path unless there are more
    keys than ``EXPLICIT_MAX_KEYS`` (lowered here to force SDPA)."""
    sdpa, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    model = build(drop_path_rate=0.)
    randomise(model)
    x = torch.randn(2, 3, *IMAGE)

    def run(fused, train, max_keys=policy.EXPLICIT_MAX_KEYS):
        monkeypatch.setattr(policy, 'EXPLICIT_MAX_KEYS', max_keys)
        set_fused(model, fused)
        model.train(train)
        model.zero_grad()
        calls.clear()
        with torch.set_grad_enabled(train):
            outs = model(x)
        if train:
            outputs_loss(outs).backward()
        return [o.detach() for o in outs], grads(model), bool(calls)

    infer_fused, _, sdpa_ran = run(True, False)
    assert sdpa_ran
    infer_explicit, _, sdpa_ran = run(False, False)
    assert not sdpa_ran
    train_auto, g_auto, sdpa_ran = run(True, True)
    assert not sdpa_ran  # the bias needs a gradient: explicit on the CPU
    train_sdpa, g_sdpa, sdpa_ran = run(True, True, max_keys=0)
    assert sdpa_ran
    for outs in (infer_explicit, train_auto, train_sdpa):
        for a, b in zip(outs, infer_fused, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert g_auto.keys() == g_sdpa.keys() and len(g_auto) > 0
    for name in g_auto:
        torch.testing.assert_close(
            g_sdpa[name], g_auto[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow  # torch.compile
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
    model = build()
    x = torch.full((2, 3, *IMAGE), 0.5 if case == 'no_change' else FILL[case])
    if case == 'no_change':  # v = 0 in every block: m has no evidence
        x = torch.randn(2, 3, *IMAGE)
        zero_values(model)
    check_finite_forward_backward(model, x, train, grad=True)


@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('how', ['autocast', 'bf16_model'])
def test_bf16(fused, how):
    """Under CPU bf16 autocast (forward and backward) and as a bf16 model
    (``model.bfloat16()``): finite, and close to fp32."""
    model = build()
    randomise(model)
    set_fused(model, fused)
    model.eval()  # no stochastic depth: fp32 and bf16 see the same model
    check_bf16(model, torch.randn(2, 3, *IMAGE), how)


def test_with_cp_saves_less_and_gives_the_same_gradients():
    check_with_cp(lambda with_cp: build(with_cp=with_cp).train(),
                  torch.randn(2, 3, *IMAGE))


def test_training_saves_no_more_window_scores_than_mmseg():
    """In training the bias needs a gradient, so the explicit path (or
    SDPA's math kernel) keeps window x window scores for the backward as
    mmseg's WindowMSA does: no more of them (by bytes) than mmseg,
    elliptical or not."""
    check_saves_no_more_scores_than_mmseg(SwinTransformer,
                                          EllipticalSwinTransformer,
                                          torch.randn(2, 3, *IMAGE),
                                          ARCH['window_size']**2, **ARCH)
