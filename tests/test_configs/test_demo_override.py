"""docs/demo.md's override puts the README's Segmenter ViT-T config on the
demo data: taken from the doc as printed, it trains for 2 iterations and
validates; the two bases side by side are refused by mmengine, as the doc
says."""
import os.path as osp
import re

import pytest
from builders import ROOT
from mmengine.config import Config
from processes import run_tool_main

pytestmark = pytest.mark.usefixtures('single_thread')


def doc_override() -> str:
    """The python block of the section 'Your own config on the demo
    data'."""
    with open(osp.join(ROOT, 'docs', 'demo.md')) as f:
        text = f.read()
    section = text.split('## Your own config on the demo data')[1]
    return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def test_the_two_bases_side_by_side_are_refused(tmp_path):
    path = tmp_path / 'both.py'
    path.write_text(
        "_base_ = ['mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-"
        f"512x512.py', '{ROOT}/configs/_base_/datasets/demo_shapes.py']\n")
    with pytest.raises(KeyError, match='Duplicate key is not allowed'):
        Config.fromfile(str(path))


@pytest.mark.slow  # trains end to end (2 iterations)
def test_the_override_trains_the_readme_config_on_the_demo_data(
        tmp_path, monkeypatch, capsys):
    text = doc_override()
    assert text.startswith("_base_ = ['mmseg::segmenter/segmenter_vit-t_")
    config = tmp_path / 'segmenter_vit-t_demo.py'
    config.write_text(text)
    monkeypatch.chdir(tmp_path)  # data_root is relative: generated here
    run_tool_main(monkeypatch, 'train.py', str(config), '--work-dir',
                  str(tmp_path / 'wd'), '--cfg-options',
                  'train_cfg.max_iters=2', 'train_cfg.val_interval=2',
                  'default_hooks.checkpoint.interval=2',
                  'val_dataloader.dataset.indices=4')
    cfg = Config.fromfile(str(config))
    assert cfg.model.backbone.type == 'EllipticalVisionTransformer'
    assert cfg.train_dataloader.dataset.type == 'DemoShapesDataset'
    assert 'reduce_zero_label' not in str(cfg.train_dataloader.dataset)
    assert osp.isfile(tmp_path / 'data' / 'demo_shapes' / 'meta.json')
    assert (f'Generating the demo scenes in {tmp_path}/data/demo_shapes '
            '(data_root data/demo_shapes, relative to the working directory)'
            ) in capsys.readouterr().out
    assert osp.isfile(tmp_path / 'wd' / 'iter_2.pth')
    logs = list((tmp_path / 'wd').glob('*/*.log'))  # the runner's log
    assert logs and 'mIoU: ' in logs[0].read_text()
