"""``models/chain.py``: values reach the next layer, also under with_cp
recomputation, gradient accumulation and torch.compile.

The oracle is ``oracles.naive_vit_forward`` (the method written out layer
by layer); the chain keeps nothing between forwards.
"""
import pytest
import torch
from builders import VIT_ARCH, images
from checks import check_compiled, check_with_cp, grads, outputs_loss
from oracles import naive_vit_forward

from mmseg_elliptical.benchmark.memory import saved_tensors_mb, tensor_peak_mb
from mmseg_elliptical.models import (EllipticalMixVisionTransformer,
                                     EllipticalVisionTransformer, ValueChain)

pytestmark = pytest.mark.usefixtures('single_thread')
MIT = dict(
    embed_dims=8,
    num_layers=[2, 2, 2, 1],
    num_heads=[1, 2, 2, 4],
    sr_ratios=[4, 2, 1, 1])


def build(cls=EllipticalVisionTransformer, **kwargs):
    torch.manual_seed(0)
    arch = VIT_ARCH if cls is EllipticalVisionTransformer else MIT
    model = cls(**dict(arch, **kwargs))
    model.init_weights()
    return model.train()


def loss_of(model, x):
    return outputs_loss(model(x))


@pytest.mark.parametrize(
    'cls', [EllipticalVisionTransformer, EllipticalMixVisionTransformer])
def test_with_cp_saves_less_and_gives_the_same_gradients(cls):
    size = 32 if cls is EllipticalVisionTransformer else 64
    check_with_cp(lambda with_cp: build(cls, with_cp=with_cp), images(0, size))


@pytest.mark.parametrize('with_cp', [False, True])
def test_two_forwards_before_one_backward(with_cp):
    """Gradient accumulation over a summed loss: each recomputation must see
    the values of its own forward, not those of the last one."""
    x1, x2 = images(1), images(2)
    model = build(with_cp=with_cp)
    (loss_of(model, x1) + loss_of(model, x2)).backward()
    accumulated = grads(model)
    reference = build()
    for x in (x1, x2):
        loss_of(reference, x).backward()  # one at a time, grads add up
    expected = grads(reference)
    for name in expected:
        torch.testing.assert_close(
            accumulated[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)


def test_chain_keeps_nothing_between_forwards():
    model = build().eval()
    chain = model.layers[0].value_chain
    assert isinstance(chain, ValueChain) and len(chain) == 4
    assert all(layer.value_chain is chain for layer in model.layers)
    with torch.no_grad():
        model(images(0))
    assert chain.values == [None] * 4
    # Values are kept only for elliptical successors: with layers 1..3
    # elliptical, 0..2 hand theirs on; with [] nothing is kept.
    assert [chain.keeps(i) for i in range(4)] == [True, True, True, False]
    plain = build(elliptical_layers=[]).layers[0].value_chain
    assert not any(plain.keeps(i) for i in range(4))


def test_inference_holds_one_values_tensor_more():
    """Without gradient, the layers' peak tensor memory exceeds that of
    the dot-product layers by the previous layer's values only: kept as a
    copy (not as a view that keeps the whole qkv projection alive), dropped
    once read (not held through the next MLP), |v - v_prev| in place."""
    tokens = torch.randn(2, 257, VIT_ARCH['embed_dims'])
    peaks = {}
    for layers in (None, []):
        model = build(elliptical_layers=layers, mlp_ratio=4).eval()

        def run_layers():
            t = tokens
            for layer in model.layers:
                t = layer(t)

        with torch.no_grad():
            run_layers()  # warm-up
            peaks[layers is None] = tensor_peak_mb(run_layers)
    values = tokens.numel() * 4 / 2**20
    extra = peaks[True] - peaks[False]
    assert values <= extra < 1.1 * values, extra / values


@pytest.mark.parametrize(
    'cls', [EllipticalVisionTransformer, EllipticalMixVisionTransformer])
def test_training_saves_only_m_more(cls):
    """With gradient, what the backward keeps exceeds the dot-product
    model's by ``m`` ([B, C] per elliptical layer) only: q gets its own GEMM
    and ``q * m`` keeps no unscaled q and no scaled weight."""
    x = images(0)
    saved = {}
    for layers in ([], None):
        model = build(cls, elliptical_layers=layers)
        saved[layers is None] = saved_tensors_mb(
            model, lambda: loss_of(model, x)) * 2**20
    elliptical = [
        layer.attn for stage in model.layer_stages() for layer in stage
        if layer.attn.elliptical
    ]
    assert elliptical  # the model is the last built: the elliptical one
    m_bytes = sum(x.shape[0] * a.embed_dims * 4 for a in elliptical)
    assert saved[True] - saved[False] == m_bytes, \
        (saved[True] - saved[False], m_bytes)


def test_each_stage_has_its_own_chain():
    model = build(EllipticalMixVisionTransformer)
    chains = [stage[1][0].value_chain for stage in model.layers]
    assert len({id(c) for c in chains}) == 4
    assert [len(c) for c in chains] == [2, 2, 2, 1]
    assert model.elliptical_layers == (1, 3, 5)
    assert [[block.attn.elliptical for block in stage[1]]
            for stage in model.layers] == [[False, True], [False, True],
                                           [False, True], [False]]


def test_layers_out_of_order_are_an_error():
    model = build().eval()
    tokens = torch.randn(2, 17, 24)
    with torch.no_grad():
        model.layers[0](tokens)
        model.layers[1](tokens)  # fine: layer 0 ran just before
        with pytest.raises(RuntimeError, match='layer 2 has not run since'):
            model.layers[3](tokens)


def test_a_failed_forward_leaves_no_stale_values():
    model = build().eval()
    x = images(0)
    with torch.no_grad():
        expected = model(x)[0]
        model.layers[0](torch.randn(2, 17, 24))  # values of other tokens
        torch.testing.assert_close(model(x)[0], expected)


@pytest.mark.slow  # torch.compile
def test_torch_compile_with_cp_matches_eager():
    """torch breaks the graph around each checkpoint; still correct.
    Without with_cp (one graph): each backbone's
    test_torch_compile_matches_eager."""
    model = build(with_cp=True)
    x = images(3)
    torch.testing.assert_close(
        naive_vit_forward(model, x), model(x)[0], atol=1e-5, rtol=1e-5)
    out = check_compiled(model, x, fullgraph=False)
    model.train()
    torch.testing.assert_close(
        out[0], naive_vit_forward(model, x), atol=1e-5, rtol=1e-5)
