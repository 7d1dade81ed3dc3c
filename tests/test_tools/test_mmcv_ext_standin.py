"""``tools/misc/mmcv_ext_standin.py``: the stand-in for mmcv's compiled ops
in a venv set up with mmcv-lite. It answers only where no real extension
exists, every op reached raises the plugin's one-line error, and its
start-up hook puts it in place before anything is imported."""
import importlib
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest
import torch
from processes import load_tool, run_command

from mmseg_elliptical.errors import INPUT_ERRORS, CompiledOpError


@pytest.fixture
def standin(monkeypatch):
    """The tool's module, with ``sys.meta_path`` restored afterwards."""
    monkeypatch.setattr(sys, 'meta_path', list(sys.meta_path))
    return load_tool('misc/mmcv_ext_standin.py')


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Two packages on ``sys.path``: ``lite_pkg`` without ``_ext`` and
    ``full_pkg`` with a real one; unloaded afterwards."""
    for name, ext in (('lite_pkg', None), ('full_pkg', 'REAL = True\n')):
        (tmp_path / name).mkdir()
        (tmp_path / name / '__init__.py').write_text('')
        if ext:
            (tmp_path / name / '_ext.py').write_text(ext)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in list(sys.modules):
        if name.split('.')[0] in ('lite_pkg', 'full_pkg'):
            del sys.modules[name]


def mmcv_lite() -> bool:
    try:
        version('mmcv-lite')
    except PackageNotFoundError:
        return False
    return True


def test_stands_in_only_where_no_real_extension_exists(standin, packages):
    for name in ('lite_pkg._ext', 'full_pkg._ext', 'lite_pkg._ext'):
        standin.install(name)
    assert [getattr(f, 'name', None)
            for f in sys.meta_path].count('lite_pkg._ext') == 1
    lite = importlib.import_module('lite_pkg._ext')
    full = importlib.import_module('full_pkg._ext')
    assert standin.is_stand_in(lite) and callable(lite.nms)
    assert full.REAL and not standin.is_stand_in(full)
    assert not hasattr(full, 'nms')
    # Not a package, and no dunder a probe would mistake for something
    assert not hasattr(lite, '__path__') and not hasattr(lite, '__wrapped__')
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module('lite_pkg._ext.sub')
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module('lite_pkg.other')


@pytest.mark.parametrize('op', ['nms', 'ms_deform_attn_forward'])
def test_every_op_reached_raises_the_clear_error(standin, packages, op):
    standin.install('lite_pkg._ext')
    ext = importlib.import_module('lite_pkg._ext')
    with pytest.raises(CompiledOpError) as error:
        getattr(ext, op)(torch.zeros(2), iou_threshold=0.5)
    text = str(error.value)
    assert f"mmcv op '{op}'" in text and 'mmcv-lite' in text, text
    assert 'make setup MMCV=full' in text and 'WHEELHOUSE' in text, text
    assert '\n' not in text and isinstance(error.value, INPUT_ERRORS)


def test_mmcv_ops_in_this_venv():
    """mmcv-lite: mmcv's own op wrappers reach the stand-in and raise;
    full mmcv: the real extension runs them."""
    import mmcv._ext
    from mmcv.ops import nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]])
    scores = torch.tensor([0.9, 0.8])
    assert getattr(mmcv._ext, '__stand_in__', False) is mmcv_lite()
    if mmcv_lite():
        with pytest.raises(CompiledOpError, match="mmcv op 'nms'"):
            nms(boxes, scores, 0.5)
    else:
        assert nms(boxes, scores, 0.5)[1].tolist() == [0]


# slow: spawns an interpreter (without site-packages: no torch, fast)
@pytest.mark.slow
def test_start_up_hook_installs_the_finder_before_any_import(
        standin, tmp_path):
    site = tmp_path / 'site-packages'
    site.mkdir()
    standin.write_hook(str(site))
    probe = ('import site, sys; site.addsitedir(sys.argv[1]); '
             'f = sys.meta_path[-1]; '
             'print(type(f).__name__, f.name, "torch" in sys.modules, '
             '"mmcv" in sys.modules)')
    out = subprocess.run([sys.executable, '-S', '-c', probe,
                          str(site)],
                         capture_output=True,
                         text=True,
                         check=True).stdout
    assert out.split() == ['StandInFinder', 'mmcv._ext', 'False', 'False']
    standin.remove_hook(str(site))
    assert not list(site.glob('mmseg_elliptical_mmcv_ext*'))


# slow: spawns an interpreter that imports mmseg
@pytest.mark.slow
def test_mmseg_apis_before_the_plugin():
    """mmseg imports ``mmcv.ops`` (so ``mmcv._ext``) before the plugin is
    imported: the stand-in of a lite venv is in place from the start."""
    out = run_command([
        sys.executable, '-c',
        'from mmseg.apis import MMSegInferencer; import mmcv._ext; '
        'print(getattr(mmcv._ext, "__stand_in__", False))'
    ]).stdout
    assert out.split()[-1] == str(mmcv_lite())
