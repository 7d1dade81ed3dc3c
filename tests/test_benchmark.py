"""The benchmark: its statistics on known numbers, memory figures that move,
FLOP handles, the derived baselines, the paper reference against a
formulation written here, and the command line at tiny sizes."""
import importlib.util
import json
import os.path as osp
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import ROOT
from mmseg.models.backbones import VisionTransformer
from torch.utils.benchmark import Measurement
from torch.utils.benchmark.utils.common import TaskSpec

from mmseg_elliptical.benchmark.flops import count_flops
from mmseg_elliptical.benchmark.memory import (RssPeak, peak_rss_in_child,
                                               saved_tensors_mb,
                                               tensor_peak_mb)
from mmseg_elliptical.benchmark.models import (BenchModel, build_model,
                                               derive_variants, make_step)
from mmseg_elliptical.benchmark.runner import (BenchmarkOptions, prepared_step,
                                               ratios, runner_of)
from mmseg_elliptical.benchmark.timing import (RatioStats, make_timer,
                                               paired_ratio, run_interleaved,
                                               summarise, verdict)
from mmseg_elliptical.models import EllipticalTransformerMixin
from mmseg_elliptical.models.conversion import ELLIPTICAL_VERSIONS
from mmseg_elliptical.utils.config import load_config

pytestmark = pytest.mark.usefixtures('single_thread')

VIT_T = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')
MMSEG_VIT_T = 'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-' \
    '512x512.py'
TINY = {
    'model.backbone.num_layers': 3,
    'model.backbone.embed_dims': 24,
    'model.backbone.img_size': 64,
    'model.decode_head.in_channels': 24,
    'model.decode_head.channels': 24,
    'model.decode_head.embed_dims': 24,
}
TINY_ARGS = ['--cfg-options'] + [f'{k}={v}' for k, v in TINY.items()]
MIB = 2**20


def tiny_variants(
        roles=('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref'),
        config=VIT_T,
        **kwargs):
    cfg = load_config(config, TINY, no_pretrained=True)
    return derive_variants('vit', config, cfg.model.to_dict(), roles, **kwargs)


# ---------------------------------------------------------------- statistics
def measurement(times, number=1):
    return Measurement(number, list(times), TaskSpec('step()', 'pass'))


def test_paired_ratio_known_numbers():
    # Per-round ratios 2, 2, 3, 1: median 2, quartiles 1.75 and 2.25.
    stats = paired_ratio([2., 4., 6., 3.], [1., 2., 2., 3.])
    assert stats == RatioStats(2., 1.75, 2.25, 4)
    # Pairing matters: the ratio of the medians would be 3.5 / 2 = 1.75.
    with pytest.raises(ValueError, match='equally long'):
        paired_ratio([1., 2.], [1.])
    with pytest.raises(ValueError, match='> 0'):
        paired_ratio([1.], [0.])


def test_summarise_known_numbers():
    # Three rounds; the last timed two runs in one block of 2 steps each.
    rounds = [
        measurement([1e-3]),
        measurement([3e-3]),
        measurement([4e-3, 20e-3], number=2)
    ]
    s = summarise(rounds, batch_size=4)
    assert s['times_ms'] == pytest.approx([1, 3, 2, 10])
    assert s['round_ms'] == pytest.approx([1, 3, 6])
    assert s['median_ms'] == pytest.approx(2.5)  # the mean would be 4
    assert s['iqr_ms'] == pytest.approx(4.75 - 1.75)
    assert s['images_per_s'] == pytest.approx(4 / 2.5e-3)


@pytest.mark.parametrize('stats,target,strict,expected', [
    (RatioStats(1.00, 0.99, 1.02, 9), 1.03, False, 'met'),
    (RatioStats(1.04, 1.02, 1.05, 9), 1.03, False, 'within noise'),
    (RatioStats(1.05, 1.04, 1.06, 9), 1.03, False, 'missed'),
    (RatioStats(0.99, 0.98, 1.00, 9), 1.00, False, 'met'),
    (RatioStats(0.99, 0.98, 1.00, 9), 1.00, True, 'within noise'),
    (RatioStats(1.00, 1.00, 1.00, 1), 1.00, True, 'missed'),
])
def test_verdict(stats, target, strict, expected):
    assert verdict(stats, target, strict) == expected


def test_run_interleaved_shuffles_rounds():
    log = []
    timers = {
        n: make_timer(lambda n=n: log.append(n), description=n)
        for n in 'abc'
    }
    out = run_interleaved(
        timers, rounds=6, seed=1, on_step=lambda: log.append('|'))
    assert {n: len(m) for n, m in out.items()} == {'a': 6, 'b': 6, 'c': 6}
    blocks = ''.join(log).split('|')[:-1]  # the calls of each timer's turn
    assert all(len(set(b)) == 1 for b in blocks)
    orders = [[b[0] for b in blocks[i:i + 3]] for i in range(0, 18, 3)]
    assert len(blocks) == 18
    assert all(sorted(o) == ['a', 'b', 'c'] for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not the same every round


def test_ratios_pair_rounds_within_a_config():
    specs = [
        BenchModel(r, 'f', r, 'c.py', {})
        for r in ('elliptical', 'fused-dot', 'mmseg-dot')
    ]
    times = {
        'elliptical': [2., 4., 1.02],
        'fused-dot': [2., 4., 1.],
        'mmseg-dot': [1., 5., 2.]
    }
    mem = {'elliptical': 100.5, 'fused-dot': 100., 'mmseg-dot': 201.}
    results = [
        dict(
            model=n,
            size=64,
            mode='infer',
            round_ms=t,
            peak_mem_mb=mem[n],
            saved_mb=None) for n, t in times.items()
    ]
    rows = {r['baseline']: r for r in ratios(specs, results)}
    assert set(rows) == {'fused-dot', 'mmseg-dot'}
    fused, mmseg = rows['fused-dot'], rows['mmseg-dot']
    assert (fused['time'], fused['time_q1'], fused['time_q3']) == \
        pytest.approx((1., 1., 1.01))
    assert fused['memory'] == pytest.approx(1.005)
    assert (fused['time_verdict'], fused['memory_verdict']) == ('met', 'met')
    # Ratios 2, 0.8, 0.51: quartiles 0.655 and 1.4 around the bound 1.
    assert (mmseg['time'], mmseg['time_q1'], mmseg['time_q3']) == \
        pytest.approx((0.8, 0.655, 1.4))
    assert mmseg['time_verdict'] == 'within noise'
    assert mmseg['memory'] == pytest.approx(0.5)
    assert mmseg['memory_verdict'] is None and mmseg['saved'] is None


# -------------------------------------------------------------------- memory
def keep_large(mib: int):
    """A step that allocates, touches and keeps ``mib`` MiB until it ends."""

    def step():
        big = torch.ones(mib * MIB // 4)
        assert float(big.sum()) == big.numel()

    return step


def test_rss_peak_moves_with_a_large_tensor():
    with RssPeak() as large:
        keep_large(64)()
    with RssPeak() as small:  # after the large one: the mark must reset
        keep_large(1)()
    assert large.measure == small.measure == 'VmHWM'
    assert large.mb - small.mb > 50


def test_rss_peak_in_child_moves_with_a_large_tensor():
    large, measure = peak_rss_in_child(keep_large, 64)
    small, _ = peak_rss_in_child(keep_large, 1)
    assert measure == 'VmHWM'
    assert large - small > 50


def test_tensor_peak_counts_allocations_and_frees():
    kept = []

    def step():
        a = torch.ones(4 * MIB // 4)
        b = a * 2  # 8 MiB live
        del a
        kept.append(torch.cat([b, b]))  # b and the 8 MiB result: 12

    assert tensor_peak_mb(step) == pytest.approx(12, abs=0.01)
    # What existed before the step is not counted; a temporary is.
    assert tensor_peak_mb(lambda: kept[0].sum()) < 0.01
    assert tensor_peak_mb(lambda: (kept[0] + 1).sum()) == \
        pytest.approx(8, abs=0.01)


def test_saved_tensors_move_with_a_large_saved_tensor():
    p = nn.Parameter(torch.ones(()))
    owner = nn.Module()
    owner.p = p
    big, small = torch.randn(4 * MIB // 4), torch.randn(16)
    assert saved_tensors_mb(owner, lambda: (big * p).sum()) == \
        pytest.approx(4, rel=1e-3)
    assert saved_tensors_mb(owner, lambda: (small * p).sum()) < 0.01
    # A parameter saved for its own gradient is not counted.
    owner.w = nn.Parameter(torch.randn(4 * MIB // 4))
    assert saved_tensors_mb(owner, lambda: (owner.w * owner.w).sum()) == 0


# --------------------------------------------------------------------- FLOPs
class Attention(nn.Module):

    def forward(self, x):

        def part(*shape):
            return x[0, :torch.Size(shape).numel()].reshape(shape)

        return F.scaled_dot_product_attention(
            part(2, 3, 10, 8), part(2, 3, 12, 8), part(2, 3, 12, 4))


def test_attention_flop_handles():
    flops, uncounted = count_flops(Attention(), torch.randn(1, 600))
    # SDPA: B H N M (d + d_v) = 2*3*10*12*(8+4).
    assert flops == 2 * 3 * 10 * 12 * 12
    assert not uncounted


# -------------------------------------------------------------- the variants
def test_variants_of_an_elliptical_config():
    ell, fused, dot, paper = tiny_variants()
    assert [v.role for v in (ell, fused, dot, paper)] == \
        ['elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref']
    assert ell.model_cfg['backbone']['type'] == 'EllipticalVisionTransformer'
    assert fused.model_cfg['backbone']['elliptical_layers'] == []
    assert fused.model_cfg['backbone']['type'] == \
        'EllipticalVisionTransformer'
    assert dot.model_cfg['backbone']['type'] == 'VisionTransformer'
    assert paper.model_cfg == ell.model_cfg and paper.explicit_attention
    # The head is mmseg's in this config: the same in every variant.
    assert {v.model_cfg['decode_head']['type']
            for v in (ell, fused, dot)} == {'SegmenterMaskTransformerHead'}
    with pytest.raises(ValueError, match='Unknown roles'):
        tiny_variants(['elliptical', 'fast'])


def test_variants_of_mmseg_config_and_elliptical_head():
    ell, fused, dot = tiny_variants(('elliptical', 'fused-dot', 'mmseg-dot'),
                                    config=MMSEG_VIT_T)
    assert ell.model_cfg['backbone']['type'] == 'EllipticalVisionTransformer'
    assert dot.model_cfg['backbone']['type'] == 'VisionTransformer'
    head_cfg = osp.join(
        ROOT, 'configs', 'segmenter',
        'segmenter_elliptical-vit-t_elliptical-mask_8xb1-160k_ade20k-'
        '512x512.py')
    cfg = load_config(
        head_cfg,
        dict(
            TINY, **{
                'model.decode_head.elliptical_layers': [1],
                'model.backbone.relevance_eps': 1e-5
            }),
        no_pretrained=True)
    ell, fused, dot = derive_variants(
        'h',
        head_cfg,
        cfg.model.to_dict(), ('elliptical', 'fused-dot', 'mmseg-dot'),
        whole_model=True)
    assert fused.model_cfg['decode_head']['elliptical_layers'] == []
    assert dot.model_cfg['decode_head']['type'] == \
        'SegmenterMaskTransformerHead'
    for part in ('backbone', 'decode_head'):
        assert not {'elliptical_layers', 'relevance_eps'} & set(
            dot.model_cfg[part])
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        outs = [build_model(v)(x, mode='tensor') for v in (fused, dot)]
    torch.testing.assert_close(outs[0], outs[1])


def test_variants_of_every_elliptical_backbone():
    backbones = {
        src: cls
        for src, cls in ELLIPTICAL_VERSIONS.items()
        if issubclass(cls, EllipticalTransformerMixin)
        and 'backbone' in cls.__module__
    }
    assert {'VisionTransformer', 'MixVisionTransformer',
            'PCPVT'} <= {s.__name__
                         for s in backbones}
    for src, cls in backbones.items():
        for backbone in (dict(type=src.__name__),
                         dict(
                             type=cls.__name__,
                             elliptical_layers=[1],
                             relevance_eps=1e-5)):
            model = dict(type='EncoderDecoder', backbone=backbone)
            ell, fused, dot = derive_variants(
                'x', 'x.py', model, ('elliptical', 'fused-dot', 'mmseg-dot'))
            assert ell.model_cfg['backbone']['type'] == cls.__name__
            assert fused.model_cfg['backbone']['elliptical_layers'] == []
            assert dot.model_cfg['backbone'] == dict(type=src.__name__)


def test_backbone_without_elliptical_version_is_measured_as_is():
    model = dict(type='EncoderDecoder', backbone=dict(type='ResNetV1c'))
    variants = derive_variants('r', 'r.py', model)
    assert [(v.name, v.role) for v in variants] == [('r', 'model')]
    assert variants[0].model_cfg == model


def test_built_variants_share_weights_and_dot_products_agree():
    models = {v.role: build_model(v) for v in tiny_variants()}
    assert type(models['mmseg-dot']) is VisionTransformer
    states = [m.state_dict() for m in models.values()]
    for state in states[1:]:
        assert state.keys() == states[0].keys()
        assert all(torch.equal(state[k], states[0][k]) for k in state)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out = {r: m(x)[-1] for r, m in models.items()}
    torch.testing.assert_close(out['fused-dot'], out['mmseg-dot'])
    torch.testing.assert_close(out['paper-ref'], out['elliptical'])
    assert not torch.allclose(out['elliptical'], out['fused-dot'])
    flops = {r: count_flops(m, x)[0] for r, m in models.items()}
    assert flops['elliptical'] == flops['fused-dot'] == flops['paper-ref']


def oracle_attention(attn, x, identity, v_prev):
    """softmax((q diag(m)) k^T / sqrt(d)) v, out_proj, shortcut; m from v."""
    w, b = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    C, H = x.shape[-1], attn.num_heads
    q, k, v = [(x @ w[i * C:(i + 1) * C].T + b[i * C:(i + 1) * C]).reshape(
        x.shape[0], -1, H, C // H).transpose(1, 2) for i in range(3)]
    if v_prev is not None:
        m = (v - v_prev).abs().mean(dim=2)  # [B, H, d]
        m = m / m.max(dim=-1, keepdim=True).values
        q = q @ torch.diag_embed(m)
    probs = torch.softmax(q @ k.transpose(-2, -1) / (C // H)**0.5, dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(x.shape)
    return identity + attn.attn.out_proj(out), v


def test_paper_reference_against_independent_formulation(monkeypatch):
    spec = tiny_variants(('paper-ref', ))[0]
    model = build_model(spec)
    calls = []

    def record(module, args, kwargs, output):
        calls.append((module, args[0], kwargs['identity'], output))

    for layer in model.layers:
        layer.attn.register_forward_hook(record, with_kwargs=True)

    def no_sdpa(*args, **kwargs):
        raise AssertionError('the paper reference ran the fused path')

    monkeypatch.setattr(F, 'scaled_dot_product_attention', no_sdpa)
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 64))
    assert len(calls) == 3
    v_prev = None
    for attn, x, identity, output in calls:
        ref, v_prev = oracle_attention(attn, x, identity, v_prev)
        torch.testing.assert_close(output, ref, atol=1e-5, rtol=1e-5)


# -------------------------------------------------------- steps and the CLI
def test_prepared_step_in_child_and_eager_compile():
    spec = tiny_variants(('elliptical', ))[0]
    options = BenchmarkOptions(sizes=[64], train_sizes=[64])
    mb, measure = peak_rss_in_child(prepared_step, spec, 64, 'train', options)
    assert measure == 'VmHWM' and mb > 0
    model = build_model(spec)
    x = torch.randn(1, 3, 64, 64)
    compiled = runner_of(model, BenchmarkOptions(compile='eager'))
    assert compiled is not model
    step = make_step(model, x, 'train', runner=compiled)
    step()
    assert all(p.grad is not None for p in model.parameters()
               if p.requires_grad)


@pytest.fixture(scope='module')
def tool():
    path = osp.join(ROOT, 'tools', 'analysis_tools', 'benchmark.py')
    spec = importlib.util.spec_from_file_location('benchmark_tool', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_cli_outputs(tool, tmp_path):
    out = tmp_path / 'bench'
    report = tool.main([
        VIT_T, '--sizes', '32', '64', '--train-sizes', '64', '--rounds', '2',
        '--roles', 'elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref',
        '--saved-tensors', '--flops-sizes', '64', '--out-dir',
        str(out), *TINY_ARGS
    ])
    saved = json.loads((out / 'benchmark.json').read_text())
    assert saved == json.loads(json.dumps(report))
    names = [m['name'] for m in saved['models']]
    assert names == ['elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref']
    flops = {m['name']: m['flops']['64'] for m in saved['models']}
    assert flops['elliptical'] == flops['fused-dot'] == flops['paper-ref']
    assert len(saved['results']) == 4 * 3  # 2 inference sizes + 1 train
    for r in saved['results']:
        assert len(r['round_ms']) == 2 and r['memory_measure'] == 'VmHWM'
        assert (r['saved_mb'] is None) == (r['mode'] == 'infer')
    train = {
        r['model']: r['saved_mb']
        for r in saved['results'] if r['mode'] == 'train'
    }
    # The explicit path keeps the probabilities for the backward.
    assert train['paper-ref'] > train['fused-dot']
    assert len(saved['ratios']) == 3 * 3
    md = (out / 'benchmark.md').read_text()
    assert '| fused-dot | 64 | training step |' in md
    assert '<= 1.03: ' in md and '< 1: ' in md
    header = (out / 'benchmark.csv').read_text().splitlines()[0]
    assert header.startswith('model,family,role,size,mode')
    assert (out / 'benchmark.png').stat().st_size > 0
    # The overview of runs: a row per size and baseline, read from the JSON.
    text = tool.main([
        '--overview',
        str(out),
        str(out), '--out-dir',
        str(tmp_path / 'overview')
    ])
    assert (tmp_path / 'overview' / 'overview.md').read_text() == text
    rows = [line.strip('|').split(' | ') for line in text.splitlines()[2:]]
    keys = {(r['size'], r['baseline']) for r in saved['ratios']}
    assert len(rows) == 2 * len(keys) == 12  # each run given twice
    by_key = {(r[0].strip(), r[1]): r for r in rows}
    for ratio in saved['ratios']:
        row = by_key[(f"{ratio['family']} at {ratio['size']}, batch 1",
                      ratio['baseline'])]
        time_cell = row[2 if ratio['mode'] == 'infer' else 3]
        median, iqr = time_cell.split(' (')
        q1, q3 = iqr.rstrip(')').split('-')
        assert [float(median), float(q1), float(q3)] == pytest.approx(
            [ratio['time'], ratio['time_q1'], ratio['time_q3']], abs=5e-4)
        memory = row[4 if ratio['mode'] == 'infer' else 5].strip()
        assert float(memory) == pytest.approx(ratio['memory'], abs=5e-4)
    family = saved['ratios'][0]['family']
    assert by_key[(f'{family} at 32, batch 1', 'fused-dot')][3] == '-'


def test_cli_two_configs_compiled_and_layer(tool, tmp_path):
    from torch._dynamo.utils import counters
    graphs = counters['stats']['unique_graphs']
    report = tool.main([
        VIT_T, MMSEG_VIT_T, '--names', 'ell', 'mm', '--sizes', '32',
        '--train-sizes', '--flops-sizes', '--rounds', '1', '--memory', 'none',
        '--compile', '--compile-backend', 'eager', '--out-dir',
        str(tmp_path), *TINY_ARGS
    ])
    # elliptical, fused-dot and mmseg-dot (the two configs' twins share)
    assert counters['stats']['unique_graphs'] >= graphs + 3
    assert [m['name'] for m in report['models']] == [
        'ell/elliptical', 'ell/fused-dot', 'ell/mmseg-dot', 'mm/elliptical',
        'mm/fused-dot', 'mm/mmseg-dot'
    ]
    assert {(r['family'], r['baseline'])
            for r in report['ratios']} == {('ell', 'ell/fused-dot'),
                                           ('ell', 'ell/mmseg-dot'),
                                           ('mm', 'mm/fused-dot'),
                                           ('mm', 'mm/mmseg-dot')}
    layer = tool.main([
        '--layer', '17', '24', '3', '--rounds', '2', '--out-dir',
        str(tmp_path)
    ])
    assert set(layer['results']) == {
        'dot-product', 'elliptical no-grad', 'elliptical grad',
        'elliptical explicit'
    }
    assert all(r['rounds'] == 2 for r in layer['ratios'].values())
    assert '| elliptical grad |' in (tmp_path / 'layer.md').read_text()
