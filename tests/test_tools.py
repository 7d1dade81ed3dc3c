"""mmseg's train/test scripts through tools/, on the tiny demo setup."""
import os.path as osp
import re
import subprocess
import sys

from conftest import DEMO_ELLIPTICAL, ROOT, TINY_GENERATE


def run_tool(script, *args):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', script),
                           *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def tiny_options(demo_root, max_iters):
    opts = [
        'model.backbone.num_layers=3', 'model.backbone.embed_dims=48',
        'model.decode_head.in_channels=48', 'model.decode_head.channels=48',
        'model.decode_head.embed_dims=48', 'train_dataloader.batch_size=2',
        f'train_cfg.max_iters={max_iters}', 'train_cfg.val_interval=2',
        'default_hooks.checkpoint.interval=2',
        'default_hooks.logger.interval=1'
    ]
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        opts.append(f'{loader}.dataset.data_root={demo_root}')
        opts += [f'{loader}.dataset.generate.{k}={v}'
                 for k, v in TINY_GENERATE.items()]
    return ['--cfg-options', *opts]


def test_train_test_resume(demo_root, tmp_path):
    work = str(tmp_path / 'work')
    log = run_tool('train.py', DEMO_ELLIPTICAL, '--work-dir', work,
                   *tiny_options(demo_root, 2))
    assert osp.isfile(osp.join(work, 'iter_2.pth'))
    assert re.search(r'Iter\(val\).*mIoU: \d+\.\d+', log)

    log = run_tool('test.py', DEMO_ELLIPTICAL, osp.join(work, 'iter_2.pth'),
                   '--work-dir', str(tmp_path / 'test'),
                   *tiny_options(demo_root, 2))
    assert re.search(r'Iter\(test\).*mIoU: \d+\.\d+', log)

    log = run_tool('train.py', DEMO_ELLIPTICAL, '--work-dir', work,
                   '--resume', *tiny_options(demo_root, 4))
    assert 'resumed epoch: 0, iter: 2' in log
    assert 'Iter(train) [1/4]' not in log and 'Iter(train) [3/4]' in log
    assert osp.isfile(osp.join(work, 'iter_4.pth'))


def test_help_lists_mmseg_flags():
    out = run_tool('test.py', '-h')
    for flag in ('--work-dir', '--out', '--show-dir', '--tta', '--launcher',
                 '--cfg-options', '--show', '--wait-time'):
        assert flag in out
    out = run_tool('train.py', '-h')
    for flag in ('--work-dir', '--resume', '--amp', '--cfg-options',
                 '--launcher'):
        assert flag in out
