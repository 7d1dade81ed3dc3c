"""The checks several test modules share: each asserts one behaviour of a
model (against mmseg's class, an oracle, another path, another dtype, another
mode), and the small helpers those checks read outputs and gradients with.

Independent re-computations of the method live in :mod:`oracles`; models and
configs are built by :mod:`builders`. ``conftest.py`` has pytest rewrite the
asserts here as the tests' own.
"""
from typing import Callable, Dict, Optional

import pytest
import torch
import torch.nn as nn
from builders import BEIT_ARCH, randomise, seg_samples, set_fused
from mmengine.config import Config
from shipped_configs import sync_bn_to_bn
from spies import saved_bytes, saved_scores_bytes
from torch import Tensor
from torch.utils._pytree import tree_flatten


def as_list(outs) -> list:
    """A model's outputs as a list of tensors (a head returns one)."""
    return [outs] if isinstance(outs, Tensor) else tree_flatten(outs)[0]


def grads(model) -> dict:
    """Gradients of all parameters that received one, by name."""
    return {
        n: p.grad.clone()
        for n, p in model.named_parameters() if p.grad is not None
    }


def outputs_loss(outs) -> Tensor:
    """A loss over every tensor of a backbone's outputs."""
    return sum(o.square().mean() for o in tree_flatten(outs)[0])


def build_pair(ref_cls, cls, **args):
    """mmseg's backbone ``ref_cls`` and its elliptical version ``cls`` in
    dot-product mode (``elliptical_layers=[]``), each built and initialised
    from seed 0."""
    pair = []
    for build, extra in ((ref_cls, {}), (cls, dict(elliptical_layers=[]))):
        torch.manual_seed(0)
        model = build(**extra, **args)
        model.init_weights()
        pair.append(model)
    return pair


def check_dot_product_equals_mmseg(ref_cls,
                                   cls,
                                   x: Tensor,
                                   randomised: bool = False,
                                   **args) -> None:
    """``cls(elliptical_layers=[])`` is mmseg's ``ref_cls``: from the same
    seed the same state dict (the conversion consumes no RNG), and the same
    outputs (every tensor of them), also with ``randomised`` weights
    (:func:`randomise`, loaded into both)."""
    ref, ours = build_pair(ref_cls, cls, **args)
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    if randomised:
        randomise(ref)
        ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    expected, outs = ref(x), ours(x)
    assert len(outs) == len(expected)
    for a, b in zip(
            tree_flatten(expected)[0], tree_flatten(outs)[0], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def check_matches_naive(model,
                        naive: Callable,
                        ref: torch.nn.Module,
                        x: Tensor,
                        atol: float = 1e-4,
                        rtol: Optional[float] = None) -> None:
    """The elliptical ``model`` (eval, no grad) gives ``naive(model, x)``'s
    outputs (every one, within ``atol`` and ``rtol``, which defaults to
    ``atol``), and not those of ``ref`` (mmseg's model) with its weights."""
    model.eval()
    with torch.no_grad():
        outs = model(x)
        expected = naive(model, x)
        assert len(outs) == len(expected)
        for a, b in zip(outs, expected, strict=True):
            torch.testing.assert_close(
                a, b, atol=atol, rtol=atol if rtol is None else rtol)
        ref.load_state_dict(model.state_dict())
        ref.eval()  # mmseg's train()/eval() return None: not chained
        assert not torch.allclose(outs[-1], ref(x)[-1], atol=1e-3)


def check_interchange(ref, ours) -> None:
    """mmseg's model ``ref`` and the plugin's ``ours`` have the same
    state-dict keys in the same order, load each other's weights strictly,
    and hold the same tensors afterwards (``ref``'s)."""
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict(), strict=True)
    ref.load_state_dict(ours.state_dict(), strict=True)
    for (k, a), b in zip(ref.state_dict().items(), ours.state_dict().values()):
        assert torch.equal(a, b), k


def check_loss_trains_every_parameter(model: nn.Module,
                                      losses: Dict[str, Tensor]) -> None:
    """The sum of the ``loss`` entries of ``losses`` (``model``'s training
    losses) is finite, and its backward gives every trainable parameter of
    ``model`` a gradient, all finite."""
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    missing = [
        n for n, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    assert not missing, missing
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)


def check_finite_forward_backward(model,
                                  x: Tensor,
                                  train: bool,
                                  input_grad: bool = False,
                                  grad: Optional[bool] = None) -> None:
    """``model(x)`` is finite in train (``train``) or eval mode; in train
    mode so is every gradient (of the input too with ``input_grad``).
    ``grad``: autograd on during the forward (defaults to ``train``)."""
    model.train(train)
    if input_grad:
        x = x.clone().requires_grad_()
    model.zero_grad()
    with torch.set_grad_enabled(train if grad is None else grad):
        outs = model(x)
    assert all(torch.isfinite(o).all() for o in outs)
    if train:
        outputs_loss(outs).backward()
        assert all(
            torch.isfinite(p.grad).all() for p in model.parameters()
            if p.grad is not None)
        if input_grad:
            assert torch.isfinite(x.grad).all()


def check_saves_no_more_scores_than_mmseg(ref_cls, cls, x: Tensor, n: int,
                                          **args) -> None:
    """A training forward of ``cls`` keeps no more ``[..., n, n]`` scores
    (by bytes) for the backward than mmseg's ``ref_cls``, elliptical or
    not."""
    saved = {}
    for name, build in (('mmseg', lambda: ref_cls(**args)),
                        ('elliptical', lambda: cls(**args)),
                        ('dot-product',
                         lambda: cls(elliptical_layers=[], **args))):
        torch.manual_seed(0)
        saved[name] = saved_scores_bytes(build(), x, n)
    assert saved['mmseg'] > 0
    assert saved['elliptical'] <= saved['mmseg'], saved
    assert saved['dot-product'] <= saved['mmseg'], saved


def check_beit_inputs(cls) -> None:
    """A BEiT-family ``cls`` (built with :data:`BEIT_ARCH`) rejects what is
    not a batch of images and a patch grid other than ``img_size``'s (mmseg's
    BEiT would silently use wrong relative positions), and runs on larger
    images of that grid."""
    model = cls(**BEIT_ARCH).eval()
    with pytest.raises(ValueError, match=r'float batch of images'):
        model(torch.zeros(3, 32, 24))
    # Same number of patches (12), other grid.
    with pytest.raises(
            ValueError,
            match=(
                rf'{cls.__name__} was built for img_size=\(32, 24\) \(a 4x3 '
                r'patch grid.*got images of \(24, 32\) \(3x4 patches\); set '
                'img_size to the crop size')):
        model(torch.zeros(1, 3, 24, 32))
    assert model(torch.zeros(1, 3, 39, 31))[0].shape == (1, 24, 4, 3)


def check_with_cp(build,
                  x,
                  loss: Optional[Callable] = None,
                  max_saved: Optional[float] = 0.5) -> tuple:
    """``build(with_cp)`` (a model in train mode): with ``with_cp=True`` the
    forward saves less for the backward (below ``max_saved`` of it; None:
    any less), and the loss and every gradient are those without.

    Args:
        build (callable): ``with_cp -> model``.
        x (Tensor): The input.
        loss (callable, optional): ``(model, x) -> loss``; defaults to
            :func:`outputs_loss` of ``model(x)``.
        max_saved (float, optional): Bound on the saved-bytes ratio.

    Returns:
        tuple: The two models (without, with ``with_cp``).
    """
    if loss is None:
        loss = lambda model, x: outputs_loss(model(x))  # noqa: E731
    results, models = {}, []
    for with_cp in (False, True):
        model = build(with_cp)
        models.append(model)
        nbytes, value = saved_bytes(lambda: loss(model, x))
        value.backward()
        results[with_cp] = nbytes, value.detach(), grads(model)
    (plain_bytes, plain_loss, plain), (cp_bytes, cp_loss, cp) = \
        results[False], results[True]
    bound = plain_bytes * (1 if max_saved is None else max_saved)
    assert cp_bytes < bound, (cp_bytes, plain_bytes)
    torch.testing.assert_close(cp_loss, plain_loss, rtol=0, atol=1e-6)
    assert cp.keys() == plain.keys() and len(plain) > 0
    for name in plain:
        torch.testing.assert_close(
            cp[name], plain[name], rtol=0, atol=1e-6, msg=name)
    return tuple(models)


def check_attention_dropout(attn, run, clean) -> None:
    """``run()`` calls the attention module ``attn`` (built with dropout 0.5
    on the probabilities): in eval mode it gives ``clean`` (the oracle's
    output, without dropout); in train mode other outputs, with fresh masks
    at each call and the same ones under the same seed."""
    attn.eval()
    torch.testing.assert_close(run(), clean, atol=1e-5, rtol=1e-5)
    attn.train()
    torch.manual_seed(1)
    first, second = run(), run()
    assert not torch.allclose(first, clean, atol=1e-3)
    assert not torch.allclose(first, second, atol=1e-3)
    torch.manual_seed(1)
    torch.testing.assert_close(run(), first)


def check_bf16(model,
               x,
               how: str,
               output: Optional[Callable] = None) -> Tensor:
    """Under CPU bf16 autocast (forward and backward) or as a bf16 model
    (``model.bfloat16()``): finite outputs and gradients, close to fp32's
    but not equal (so bf16 was in effect).

    Args:
        model (nn.Module): The model (its mode is kept).
        x (Tensor): The fp32 input.
        how (str): ``'autocast'`` or ``'bf16_model'``.
        output (callable, optional): ``(model, x) -> tensor`` compared;
            defaults to the last output of ``model(x)``.

    Returns:
        Tensor: The bf16 output.
    """
    if output is None:
        output = lambda model, x: model(x)[-1]  # noqa: E731
    with torch.no_grad():
        ref = output(model, x)
    if how == 'autocast':
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = output(model, x)
    else:
        out = output(model.bfloat16(), x.bfloat16())
        assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)
    # bf16 keeps ~3 significant digits.
    err = (out.float() - ref).abs().max() / ref.abs().max()
    assert 0 < err < 0.1, f'bf16 deviates from fp32 by {err:.3g} (rel.)'
    return out


def check_compiled(model, x, fullgraph: bool = True) -> list:
    """``torch.compile(model)`` (backend ``aot_eager``: the graph torch
    traces, without inductor's kernels) gives eager's outputs and gradients
    in train mode, and eager's outputs in eval mode without grad (the two
    ways the value chain runs). ``model`` has no dropout. ``fullgraph``:
    one graph, no breaks. Returns the compiled outputs of the train step."""

    def train_step(fn):
        model.zero_grad()
        outs = fn(x)
        sum(o.square().mean() for o in outs).backward()
        return [o.detach() for o in outs], grads(model)

    torch._dynamo.reset()
    try:
        model.train()
        compiled = torch.compile(
            model, backend='aot_eager', fullgraph=fullgraph)
        (outs, g), (ref_outs, ref_g) = train_step(compiled), train_step(model)
        train_outs = list(outs)
        model.eval()
        with torch.no_grad():
            outs += compiled(x)
            ref_outs += model(x)
    finally:
        torch._dynamo.reset()
    for a, b in zip(outs, ref_outs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert g.keys() == ref_g.keys() and len(g) > 0
    for name in ref_g:
        torch.testing.assert_close(
            g[name], ref_g[name], atol=1e-6, rtol=1e-5, msg=name)
    return train_outs


def assert_close_relative(got: Tensor,
                          expected: Tensor,
                          tol: float,
                          what: str = '') -> None:
    """``|got - expected| <= tol * |expected|`` in the Euclidean norm (fp32):
    a bound on the error of the whole tensor relative to its size."""
    got, expected = got.float(), expected.float()
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    err, size = float((got - expected).norm()), float(expected.norm())
    assert err <= tol * size, f'{what}: {err:.3g} > {tol} * {size:.3g}'


def check_fused_equals_explicit(model,
                                x,
                                autocast: Optional[torch.dtype] = None,
                                tol: float = 1e-4,
                                grad_tol: Optional[float] = None) -> None:
    """The fused path (SDPA) and the explicit one give the same outputs in
    eval mode without grad, and the same outputs and gradients in train
    mode (``model`` has no dropout), on the input's device, optionally
    under autocast to ``autocast``; each within ``tol`` of the largest
    value (:func:`assert_close_relative`). Each path really runs (an SDPA
    spy).

    Args:
        model (nn.Module): A backbone or head with elliptical attentions.
        x (Tensor or list): Its input.
        autocast (torch.dtype, optional): Autocast to this dtype.
        tol (float): Relative tolerance of the outputs.
        grad_tol (float, optional): Of the gradients; defaults to ``tol``.
    """
    import torch.nn.functional as F
    device = tree_flatten(x)[0][0].device.type
    sdpa, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    def cast():
        return torch.autocast(
            device, dtype=autocast, enabled=autocast is not None)

    def run(fused: bool):
        set_fused(model, fused)
        model.eval()
        with torch.no_grad(), cast():
            infer = [o.float() for o in as_list(model(x))]
        model.train()
        model.zero_grad()
        with cast():
            outs = [o.float() for o in as_list(model(x))]
        outputs_loss(outs).backward()
        return infer + [o.detach() for o in outs], grads(model)

    F.scaled_dot_product_attention = spy
    try:
        explicit = run(False)
        assert not calls, 'fused_attn=False ran SDPA'
        fused = run(True)
        assert calls, 'fused_attn=True never ran SDPA'
    finally:
        F.scaled_dot_product_attention = sdpa
        set_fused(model, True)
    assert len(fused[0]) == len(explicit[0])
    for i, (a, b) in enumerate(zip(fused[0], explicit[0])):
        assert torch.isfinite(a).all() and torch.isfinite(b).all(), i
        assert_close_relative(a, b, tol, f'output {i}')
    # Gradients as one vector: a tensor of tiny gradients (the first
    # layers') is as close in absolute terms, not relative to its own size.
    assert fused[1].keys() == explicit[1].keys() and len(fused[1]) > 0
    names = sorted(explicit[1])
    assert_close_relative(
        torch.cat([fused[1][n].flatten().float() for n in names]),
        torch.cat([explicit[1][n].flatten().float() for n in names]),
        tol if grad_tol is None else grad_tol, 'gradients')


def tiny_train_step(path: str, options: dict, size: int = 64):
    """Build a config's model shrunk by ``options``, run the loss on two
    random images and backpropagate: the loss and every backbone gradient
    are finite. Returns the config, the model and the losses."""
    from mmseg.registry import MODELS
    cfg = Config.fromfile(path)
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None  # no download
    cfg.merge_from_dict(options)
    sync_bn_to_bn(cfg.model)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    samples = seg_samples(2, size, size, cfg.model.decode_head.num_classes)
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
