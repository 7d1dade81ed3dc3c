"""The models that mask their gradients on purpose (tests/masking.py) as
the shipped helper config builds them: the quantised demo model sees the
rounded image, and gives every input pixel a zero gradient."""
import os.path as osp

import torch
from builders import ROOT, seg_samples
from masking import QuantisingPreProcessor
from mmengine.config import Config

from mmseg_elliptical.robustness.attacks.pgd import seg_logits

QUANTISED = osp.join(ROOT, 'tests', 'masking_configs',
                     'demo_elliptical_quantised.py')


def demo_models():
    """The honest demo model and its quantised twin with the same
    (random, seeded) weights, in eval mode."""
    from mmengine.registry import init_default_scope
    from mmengine.utils import import_modules_from_strings
    from mmseg.registry import MODELS
    cfg = Config.fromfile(QUANTISED)
    import_modules_from_strings(**cfg.custom_imports)
    init_default_scope('mmseg')
    honest_cfg = cfg.model.copy()
    honest_cfg.data_preprocessor = dict(
        honest_cfg.data_preprocessor, type='SegDataPreProcessor')
    honest_cfg.data_preprocessor.pop('step')
    torch.manual_seed(0)
    honest = MODELS.build(honest_cfg)
    honest.init_weights()
    quantised = MODELS.build(cfg.model)
    quantised.load_state_dict(honest.state_dict())
    return honest.eval(), quantised.eval()


def test_the_quantised_demo_model_masks_every_gradient():
    honest, quantised = demo_models()
    assert isinstance(quantised.data_preprocessor, QuantisingPreProcessor)
    gen = torch.Generator().manual_seed(3)
    images = [torch.rand(3, 64, 64, generator=gen) * 255 for _ in range(2)]
    samples = seg_samples(2, 64, 64, num_classes=5)
    rounded = [torch.round(x / 32) * 32 for x in images]
    with torch.no_grad():
        want = seg_logits(honest, rounded, samples)
        got = seg_logits(quantised, images, samples)
        plain = seg_logits(honest, images, samples)
    for g, w, p in zip(got, want, plain):
        torch.testing.assert_close(g, w)
        assert not torch.allclose(g, p)  # it sees the rounded image
    assert all(not g.any()
               for g in input_gradients(quantised, images, samples))
    assert all(g.abs().sum() > 0
               for g in input_gradients(honest, images, samples))


def input_gradients(model, images, samples):
    """Each image's gradient of its logits' summed log-sum-exp."""
    xs = [x.clone().requires_grad_() for x in images]
    total = sum(lg.logsumexp(0).sum() for lg in seg_logits(model, xs, samples))
    return torch.autograd.grad(total, xs, allow_unused=True)
