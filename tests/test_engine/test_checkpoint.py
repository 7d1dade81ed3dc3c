"""``engine/checkpoint.py``: mmengine checkpoints under torch's
weights-only loader (the plugin's loader, its switch, what it refuses), and
dot-product <-> elliptical Segmenter checkpoints."""
import argparse
import json
import os
import os.path as osp
import pickle
import sys

import pytest
import torch
from builders import DEMO_DOT, DEMO_ELLIPTICAL, build_segmentor, tiny_config
from mmengine.runner import CheckpointLoader, Runner, load_checkpoint
from mmengine.runner.checkpoint import save_checkpoint
from mmseg.apis import init_model
from processes import run_command

from mmseg_elliptical.engine import load_from_local

pytestmark = pytest.mark.usefixtures('single_thread')


@pytest.mark.slow  # trains end to end (mmengine's Runner)
def test_segmenter_checkpoints_load_strictly_both_ways(tmp_path) -> None:
    dot = build_segmentor(DEMO_DOT)
    ell = build_segmentor(
        DEMO_ELLIPTICAL,
        **{'model.decode_head.type': 'EllipticalMaskTransformerHead'})
    assert type(dot.backbone).__name__ == 'VisionTransformer'
    assert type(dot.decode_head).__name__ == 'SegmenterMaskTransformerHead'
    assert type(ell.decode_head).__name__ == 'EllipticalMaskTransformerHead'
    for src, dst, name in ((dot, ell, 'dot.pth'), (ell, dot, 'ell.pth')):
        with torch.no_grad():
            for p in src.parameters():
                p.add_(torch.randn_like(p))  # differ from dst's init
        save_checkpoint(src.state_dict(), str(tmp_path / name))
        load_checkpoint(dst, str(tmp_path / name), strict=True)
        for (k1, v1), (k2, v2) in zip(src.state_dict().items(),
                                      dst.state_dict().items()):
            assert k1 == k2 and torch.equal(v1, v2)


# ---------------------------------------------------------------------------
# mmengine checkpoints under torch.load(weights_only=True)


@pytest.fixture(scope='module')
def trained(demo_root, tmp_path_factory):
    """A 2-iteration training run of the tiny elliptical demo."""
    work_dir = str(tmp_path_factory.mktemp('ckpt_run'))
    cfg = tiny_config(
        DEMO_ELLIPTICAL, demo_root, work_dir, **{
            'train_cfg.max_iters': 2,
            'experiment_name': 'checkpoints_run'
        })
    Runner.from_cfg(cfg).train()
    cfg_file = osp.join(work_dir, 'tiny.py')
    cfg.dump(cfg_file)
    return cfg_file, osp.join(work_dir, 'iter_2.pth')


@pytest.mark.slow  # the trained fixture
def test_mmengine_checkpoint_needs_the_allow_list(trained) -> None:
    _, ckpt = trained
    # Plain torch refuses mmengine's checkpoint: the allow-list is needed...
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer'):
        torch.load(ckpt, weights_only=True)
    # ...and the plugin's loader (mmengine's loader for local files) reads it
    # without leaving the weights-only mode.
    assert CheckpointLoader._schemes[''] is load_from_local
    state = CheckpointLoader.load_checkpoint(ckpt, map_location='cpu')
    assert state['meta']['iter'] == 2
    assert 'message_hub' in state and 'optimizer' in state


# A fresh interpreter: the loader is installed at import, so the switch must
# be read before it.
LOADER_SWITCH = r'''
import json, pickle, sys
from mmengine.logging import MMLogger
from mmengine.runner.checkpoint import CheckpointLoader
import mmseg_elliptical
MMLogger.get_instance('switch', log_level='DEBUG')  # the loader's line
from mmseg_elliptical.engine import (load_from_local,
                                    register_checkpoint_loader,
                                    unregister_checkpoint_loader)

def state(path):
    try:
        CheckpointLoader.load_checkpoint(path, map_location='cpu')
        loads = True
    except pickle.UnpicklingError:
        loads = False
    return [CheckpointLoader._schemes[''] is load_from_local, loads]

out = {'import': state(sys.argv[1])}
unregister_checkpoint_loader()
out['unregistered'] = state(sys.argv[1])
register_checkpoint_loader()
out['registered'] = state(sys.argv[1])
print(json.dumps(out))
'''


@pytest.mark.slow  # the trained fixture, subprocesses
@pytest.mark.parametrize('switch', [None, '0'])
def test_checkpoint_loader_switch(trained, switch) -> None:
    env = dict(os.environ, OMP_NUM_THREADS='1')
    env.pop('MMSEG_ELLIPTICAL_CHECKPOINT_LOADER', None)
    if switch is not None:
        env['MMSEG_ELLIPTICAL_CHECKPOINT_LOADER'] = switch
    proc = run_command([sys.executable, '-c', LOADER_SWITCH, trained[1]],
                       env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    on = switch is None
    # [plugin loader installed, the mmengine checkpoint loads]
    assert out['import'] == [on, on]
    assert out['unregistered'] == [False, False]  # mmengine's own loader
    assert out['registered'] == [on, on]
    logged = proc.stdout.count('with mmengine\'s own objects allowed')
    assert logged == (1 if on else 0)  # once, although installed twice


@pytest.mark.slow  # the trained fixture
def test_init_model_loads_checkpoint(trained) -> None:
    cfg_file, ckpt = trained
    model = init_model(cfg_file, ckpt, device='cpu')
    weights = load_from_local(ckpt)['state_dict']
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert type(model.backbone).__name__ == 'EllipticalVisionTransformer'


class Payload:
    """Unpickling it would create ``marker`` (runs code at load time)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def test_disallowed_globals_are_refused(tmp_path) -> None:
    marker = str(tmp_path / 'marker')
    evil = str(tmp_path / 'evil.pth')
    torch.save({
        'state_dict': {
            'w': torch.ones(1)
        },
        'x': Payload(marker)
    }, evil)
    custom = str(tmp_path / 'custom.pth')
    torch.save({'state_dict': {}, 'meta': argparse.Namespace(a=1)}, custom)
    for path, name in ((evil, 'open'), (custom, 'argparse.Namespace')):
        with pytest.raises(pickle.UnpicklingError, match=name):
            CheckpointLoader.load_checkpoint(path, map_location='cpu')
        model = torch.nn.Linear(1, 1)
        with pytest.raises(pickle.UnpicklingError, match='Unsupported global'):
            load_checkpoint(model, path)
    assert not osp.exists(marker)


# ---------------------------------------------------------------------------
# Unreadable checkpoints


@pytest.fixture(scope='module')
def whole(tmp_path_factory) -> str:
    """A checkpoint of about 400 KB in torch's zip format."""
    path = str(tmp_path_factory.mktemp('whole') / 'whole.pth')
    torch.save(dict(state_dict=dict(w=torch.randn(100_000))), path)
    return path


def cut(whole: str, tmp_path, size: int) -> str:
    path = str(tmp_path / f'cut{size}.pth')
    with open(whole, 'rb') as src, open(path, 'wb') as dst:
        dst.write(src.read(size))
    return path


@pytest.mark.parametrize('kind', ['empty', 'cut 100 KB', 'cut 20 KB', 'text'])
def test_an_unreadable_checkpoint_is_named(whole, tmp_path, kind) -> None:
    from mmseg_elliptical.engine import CheckpointError, check_checkpoint
    if kind == 'empty':
        path, why = str(tmp_path / 'empty.pth'), 'it is empty'
        open(path, 'wb').close()
    elif kind == 'text':
        path, why = str(tmp_path / 'page.pth'), 'it is a text file'
        with open(path, 'w') as f:
            f.write('<!DOCTYPE html>\n<html>Not Found</html>\n')
    else:
        size = 1000 * int(kind.split()[1])
        path, why = cut(whole, tmp_path, size), 'it is cut short'
    size = f'({osp.getsize(path):,} bytes)'
    # torch's own message names neither the file nor the cause.
    with pytest.raises(Exception) as raw:
        torch.load(path)
    assert path not in str(raw.value)
    for load in (check_checkpoint, CheckpointLoader.load_checkpoint,
                 load_from_local):
        with pytest.raises(CheckpointError) as error:
            load(path)
        message = str(error.value)
        assert message.startswith(f'Checkpoint {path} {size} is not a '
                                  'complete torch checkpoint: ')
        assert why in message and 'Download it again' in message
    if kind == 'text':
        assert "'<!DOCTYPE html>'" in message
    # The loader keeps torch's error as the cause.
    with pytest.raises(CheckpointError) as error:
        load_from_local(path)
    assert kind == 'text' or kind == 'empty' or \
        error.value.__cause__ is not None


def test_a_sound_checkpoint_passes_the_check(whole, trained) -> None:
    from mmseg_elliptical.engine import check_checkpoint
    assert check_checkpoint(whole) == whole
    assert check_checkpoint(trained[1]) == trained[1]
    legacy = whole.replace('.pth', '_legacy.pth')
    torch.save({'w': torch.ones(3)},
               legacy,
               _use_new_zipfile_serialization=False)
    assert check_checkpoint(legacy) == legacy
    assert torch.equal(load_from_local(legacy)['w'], torch.ones(3))
    with pytest.raises(FileNotFoundError, match='does not exist'):
        check_checkpoint(whole + '.missing')
    # A legacy file cut short: its structure looks sound, the load names it.
    from mmseg_elliptical.engine import CheckpointError
    with open(legacy, 'rb') as f:
        data = f.read()
    with open(legacy, 'wb') as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match='cut short'):
        load_from_local(legacy)
