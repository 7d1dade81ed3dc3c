"""mmseg's inference API with the plugin's models: ``init_model`` +
``inference_model`` in slide mode on odd image sizes (against
``oracles.naive_slide_inference``), and ``MMSegInferencer`` offline with a
config path + weights."""
import os.path as osp
from typing import Tuple

import cv2
import numpy as np
import pytest
import torch
from builders import DEMO_ELLIPTICAL, tiny_config
from evidence_oracles import naive_slide_inference
from mmengine.runner.checkpoint import save_checkpoint
from mmseg.apis import MMSegInferencer, inference_model, init_model

from mmseg_elliptical.datasets.demo_shapes import CLASSES, PALETTE

pytestmark = pytest.mark.usefixtures('single_thread')

CROP, STRIDE = 64, 48
H, W = 75, 101  # neither a multiple of the patch (8), the crop nor stride


@pytest.fixture(scope='module')
def elliptical_checkpoint(demo_root, tmp_path_factory) -> Tuple[str, str]:
    """A slide-mode config file and a checkpoint of its (elliptical) model."""
    tmp = tmp_path_factory.mktemp('inference')
    cfg = tiny_config(
        DEMO_ELLIPTICAL, demo_root, str(tmp), **{
            'model.decode_head.type':
            'EllipticalMaskTransformerHead',
            'model.test_cfg':
            dict(
                mode='slide', crop_size=(CROP, CROP), stride=(STRIDE, STRIDE)),
        })
    cfg_file = str(tmp / 'slide.py')
    cfg.dump(cfg_file)
    torch.manual_seed(0)
    model = init_model(cfg_file, device='cpu')
    with torch.no_grad():  # not the initialisation: a "trained" model
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ckpt = str(tmp / 'elliptical.pth')
    save_checkpoint(
        {
            'state_dict': model.state_dict(),
            'meta': dict(dataset_meta=dict(classes=CLASSES, palette=PALETTE))
        }, ckpt)
    return cfg_file, ckpt


@pytest.fixture(scope='module')
def image() -> np.ndarray:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    cv2.circle(img, (40, 30), 15, (0, 0, 255), -1)
    return img


def test_init_model_and_slide_inference(elliptical_checkpoint, image) -> None:
    cfg_file, ckpt = elliptical_checkpoint
    model = init_model(cfg_file, ckpt, device='cpu')
    assert type(model.backbone).__name__ == 'EllipticalVisionTransformer'
    assert type(model.decode_head).__name__ == 'EllipticalMaskTransformerHead'
    assert model.dataset_meta['classes'] == CLASSES
    result = inference_model(model, image)
    logits = result.seg_logits.data
    assert logits.shape == (len(CLASSES), H, W)
    assert torch.isfinite(logits).all()
    expected = naive_slide_inference(model, image, CROP, STRIDE, len(CLASSES))
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(result.pred_sem_seg.data[0], expected.argmax(0))


def test_mmseg_inferencer_offline(elliptical_checkpoint, image,
                                  tmp_path) -> None:
    cfg_file, ckpt = elliptical_checkpoint
    inferencer = MMSegInferencer(model=cfg_file, weights=ckpt, device='cpu')
    expected = inference_model(
        init_model(cfg_file, ckpt, device='cpu'),
        image).pred_sem_seg.data[0].numpy()

    out = inferencer(image)
    assert out['predictions'].shape == (H, W)
    np.testing.assert_array_equal(out['predictions'], expected)

    # From a file, writing the prediction and its visualisation.
    path = str(tmp_path / 'odd.png')
    cv2.imwrite(path, image)
    inferencer(path, out_dir=str(tmp_path / 'out'))
    pred = cv2.imread(
        osp.join(tmp_path, 'out', 'pred', '00000001_pred.png'),
        cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(pred, expected)
    vis = cv2.imread(osp.join(tmp_path, 'out', 'vis', 'odd.png'))
    assert vis is not None and vis.shape == (H, W, 3)
