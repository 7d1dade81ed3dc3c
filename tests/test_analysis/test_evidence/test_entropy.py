"""layer_entropy: every layer of a saved demo model, uniform attention when
q = k = 0."""
import math

import pytest
import torch
from saved_models import first_images, load_model

from mmseg_elliptical.analysis import layer_entropy, transformer_layers

pytestmark = pytest.mark.usefixtures('single_thread')


def zero_qkv(model) -> None:
    """q = k = v = 0 in every layer: every score alike."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'in_proj' in name:
                p.zero_()


@pytest.mark.parametrize('index', [0, 2])  # elliptical, dot-product twin
def test_uniform_attention_has_the_entropy_of_its_keys(demo_models, index):
    model = load_model(demo_models[index:index + 2])
    batches = list(first_images(demo_models[index], 2))
    found = transformer_layers(model, convert=True)
    before = layer_entropy(model, found, batches)
    assert all(0 < e < math.log(65) for e in before)  # random weights
    zero_qkv(model)
    keys = 8 * 8 + 1  # the 8 x 8 patch grid and the cls token
    assert layer_entropy(model, found, batches) == pytest.approx(
        [math.log(keys)] * len(found.layers), rel=1e-6)


def test_decode_head_layers(demo_models):
    model = load_model(demo_models[:2])
    batches = list(first_images(demo_models[0], 1))
    found = transformer_layers(model, 'decode_head', convert=True)
    zero_qkv(model)
    keys = 8 * 8 + 5  # the backbone's grid and the 5 class embeddings
    assert layer_entropy(model, found, batches) == pytest.approx(
        [math.log(keys)] * 2, rel=1e-6)  # float32 probabilities
