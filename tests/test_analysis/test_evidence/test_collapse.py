"""Representation collapse per layer, per family, against hand
computations on the layers' own outputs."""
import json
import os.path as osp

import pytest
import torch
from builders import ROOT, TINY_MODELS
from evidence_oracles import pairwise_cosine
from processes import launch_env, load_tool, run_command
from saved_models import first_images, hand_collapse, load_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (mean_pairwise_cosine, measure_collapse,
                                       relevance_spread)
from mmseg_elliptical.benchmark.memory import tensor_peak_mb
from mmseg_elliptical.utils import model_specs

pytestmark = pytest.mark.usefixtures('single_thread')

#: Per family, by hand: one layer's module, its global index and the token
#: positions that are grid cells.
HAND = dict(
    vit=(lambda bb: bb.layers[1], 1, slice(1, None)),
    beit=(lambda bb: bb.layers[2], 2, slice(1, None)),
    mae=(lambda bb: bb.layers[1], 1, slice(1, None)),
    mit=(lambda bb: bb.layers[1][1][0], 1, slice(None)),
    pcpvt=(lambda bb: bb.layers[1][1], 3, slice(None)),
    swin=(lambda bb: bb.stages[0].blocks[1], 1, slice(None)),
)


@pytest.mark.parametrize('family', sorted(HAND))
def test_collapse_per_family(family, family_models):
    spec, = model_specs(family_models[family])
    result = measure_collapse(spec, max_images=2, progress=False)
    stages = TINY_MODELS[family].stages
    assert result['stage'] == stages
    assert len(result['cosine']) == len(stages)
    pick, index, tokens = HAND[family]
    cos, samples, count = hand_collapse(family_models[family], pick, tokens, 2)
    assert result['cosine'][index] == pytest.approx(cos, abs=1e-6)
    # BEiT and MAE: 2 x 3 crops of 32 x 24 of each 64 x 64 scene.
    assert result['samples'] == samples == (12
                                            if TINY_MODELS[family].crop else 2)
    assert result['images'] == 2
    # Grid tokens only: no cls token; Swin's 16 x 16 grid without the
    # padding to 18 x 18 windows.
    grid = TINY_MODELS[family].grids[stages[index]]
    assert result['tokens'][index] == count == grid[0] * grid[1]
    # m is estimated in every layer but the first of each stage.
    firsts = [i == 0 or stages[i] != stages[i - 1] for i in range(len(stages))]
    assert [s is None for s in result['relevance_spread']] == firsts
    assert all(s > 0 for s in result['relevance_spread'] if s is not None)


def test_collapse_of_the_decode_head(demo_models):
    ell = model_specs(demo_models[:2])[0]
    result = measure_collapse(
        ell, part='decode_head', max_images=2, progress=False)
    assert len(result['cosine']) == 2
    model = load_model(demo_models[:2])
    seen = []
    model.decode_head.layers[1].register_forward_hook(
        lambda m, args, out: seen.append(out[:, :-5]))  # 5 class embeddings
    with torch.no_grad():
        for batch in first_images(demo_models[0], 2):
            model.test_step(batch)
    expected = torch.cat([pairwise_cosine(t) for t in seen]).mean().item()
    assert result['cosine'][1] == pytest.approx(expected, abs=1e-6)
    assert result['tokens'] == [64, 64]
    # The demo's head is mmseg's (dot-product): no m.
    assert result['relevance_spread'] == [None, None]


def test_mean_pairwise_cosine_extremes_and_brute_force():
    same = torch.randn(1, 1, 8).expand(2, 5, 8)
    torch.testing.assert_close(
        mean_pairwise_cosine(same), torch.ones(2, dtype=torch.float64))
    ortho = torch.eye(6).unsqueeze(0)
    torch.testing.assert_close(
        mean_pairwise_cosine(ortho), torch.zeros(1, dtype=torch.float64))
    opposite = torch.tensor([[[1., 0.], [-1., 0.]]])
    assert mean_pairwise_cosine(opposite).item() == pytest.approx(-1)
    x = torch.randn(3, 7, 4)
    torch.testing.assert_close(mean_pairwise_cosine(x), pairwise_cosine(x))
    with pytest.raises(ValueError, match='N >= 2'):
        mean_pairwise_cosine(torch.randn(2, 1, 4))


def test_mean_pairwise_cosine_builds_no_token_matrix():
    # 4096 tokens: an N x N float64 matrix alone would take 128 MiB.
    x = torch.randn(1, 4096, 8)
    assert tensor_peak_mb(lambda: mean_pairwise_cosine(x)) < 4


def test_relevance_spread():
    assert relevance_spread(torch.ones(2, 3, 1, 4)).tolist() == [0, 0]
    m = torch.tensor([0., 1.]).expand(1, 2, 1, 2)
    assert relevance_spread(m).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r'\[B, H, 1, d\]'):
        relevance_spread(torch.ones(2, 4))


def test_collapse_tool(demo_models, tmp_path):
    results = load_tool('analysis_tools/collapse.py').main(
        demo_models +
        ['--out-dir',
         str(tmp_path), '--max-images', '2', '--names', 'e', 'd'])
    for name, paths in (('e', demo_models[:2]), ('d', demo_models[2:])):
        cos, _, _ = hand_collapse(paths, lambda bb: bb.layers[2],
                                  slice(1, None), 2)
        assert results[name]['cosine'][2] == pytest.approx(cos, abs=1e-6)
    assert results['d']['relevance_spread'] == [None] * 3
    assert json.loads((tmp_path / 'collapse.json').read_text()) == results
    md = (tmp_path / 'collapse.md').read_text()
    assert '| layer | stage | tokens | e cos | d cos | e m spread |' in md
    assert osp.getsize(tmp_path / 'collapse.png') > 0


@pytest.mark.slow
def test_collapse_on_two_processes_is_the_single_process_one(
        family_models, tmp_path):
    """The images split across 2 gloo processes (3 images: the sampler pads
    the second process's share), gathered in dataset order: the same file
    to the last digit. BEiT: 2 x 3 slide crops per image."""
    args = [*family_models['beit'], '--max-images', '3', '--names', 'b']
    one = load_tool('analysis_tools/collapse.py').main(
        args + ['--out-dir', str(tmp_path / 'one')])
    assert one['b']['images'] == 3 and one['b']['samples'] == 18
    run_command([
        'bash',
        osp.join(ROOT, 'tools', 'dist_launch.sh'),
        'analysis_tools/collapse.py', '2', *args, '--out-dir',
        str(tmp_path / 'two')
    ],
                env=launch_env())
    assert (tmp_path / 'two' / 'collapse.json').read_text() == \
        (tmp_path / 'one' / 'collapse.json').read_text()
