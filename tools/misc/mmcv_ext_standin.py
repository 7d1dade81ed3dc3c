"""A stand-in for mmcv's compiled ops (``mmcv._ext``) beside mmcv-lite.

mmseg imports ``mmcv.ops`` unconditionally (``mmseg.utils``), and
``mmcv.ops`` loads the compiled ``mmcv._ext``, which mmcv-lite does not ship.
Off CUDA the mmcv ops the plugin's models use (deformable attention,
``point_sample``) run in PyTorch, so a module whose functions raise when
called is enough to import and run them.

``tools/misc/setup_env.sh`` (the lite path, docs/install.md) writes this file
into the venv's site-packages with a ``.pth`` start-up hook that calls
:func:`install`: every interpreter of the venv then finds the stand-in,
whatever it imports first (``from mmseg.apis import MMSegInferencer`` before
the plugin included). The hook only appends a finder to ``sys.meta_path``
(no torch or mmcv import at start-up). The finder is asked last, so a real
compiled extension, where there is one, is always found first.

Standard library only: it runs at every interpreter start.

Usage: ``python tools/misc/mmcv_ext_standin.py install|remove SITE_DIR``.
"""
import os
import os.path as osp
import shutil
import sys
from importlib.machinery import ModuleSpec

#: The module the stand-in answers for.
EXT = 'mmcv._ext'
#: The hook's module and ``.pth`` file in site-packages.
HOOK = 'mmseg_elliptical_mmcv_ext'
FIX = ('install full mmcv: `make setup MMCV=full` (it compiles mmcv for '
       'about 15 min on 2 cores; add WHEELHOUSE=DIR with a prebuilt mmcv '
       '2.1.0 wheel to skip that), see docs/troubleshooting.md')


def compiled_op_error(op: str) -> Exception:
    """The error a call to a compiled op ``op`` raises: the plugin's
    ``CompiledOpError`` (a plain ``RuntimeError`` without the plugin).

    Args:
        op (str): The op's name in ``mmcv._ext``.

    Returns:
        Exception: The error, naming the op and the fix.
    """
    message = (f"mmcv op '{op}' needs mmcv's compiled ops ({EXT}), and this "
               f'venv has mmcv-lite with a stand-in for them: {FIX}')
    try:  # at call time only: importing the plugin at start-up costs seconds
        from mmseg_elliptical.errors import CompiledOpError
    except ImportError:
        return RuntimeError(message)
    return CompiledOpError(message)


def missing_op(op: str):
    """A function standing in for the compiled op ``op``: it raises
    :func:`compiled_op_error` when called."""

    def call(*args, **kwargs):
        raise compiled_op_error(op)

    call.__name__ = call.__qualname__ = op
    return call


def _module_getattr(name: str):
    # Dunder and private names stay missing: importlib, pickle and inspect
    # probe them (a ``__path__`` would make the stand-in a package).
    if name.startswith('_'):
        raise AttributeError(f'module {EXT!r} has no attribute {name!r}')
    return missing_op(name)


class StandInFinder:
    """A meta-path finder and loader that answers for one module name with
    a stand-in whose every public attribute is a :func:`missing_op`.

    Args:
        name (str): The module it answers for. Defaults to ``mmcv._ext``.
    """

    def __init__(self, name: str = EXT) -> None:
        self.name = name

    def find_spec(self, fullname: str, path=None, target=None):
        """A spec for :attr:`name`, None for any other module."""
        if fullname != self.name:
            return None
        return ModuleSpec(fullname, self, origin='mmseg-elliptical stand-in')

    def create_module(self, spec):
        """None: Python's default module object."""
        return None

    def exec_module(self, module) -> None:
        """Make ``module`` the stand-in."""
        module.__stand_in__ = True
        module.__getattr__ = _module_getattr


def install(name: str = EXT) -> None:
    """Append a :class:`StandInFinder` for ``name`` to ``sys.meta_path``
    (once). Last in the list, it is asked only when no other finder, the
    one of a real compiled extension included, has found the module."""
    if not any(
            getattr(f, 'name', None) == name
            and type(f).__name__ == StandInFinder.__name__
            for f in sys.meta_path):
        sys.meta_path.append(StandInFinder(name))


def is_stand_in(module) -> bool:
    """Whether ``module`` (e.g. ``mmcv._ext``) is the stand-in."""
    return getattr(module, '__stand_in__', False) is True


def write_hook(site_dir: str) -> None:
    """Install the start-up hook into ``site_dir`` (a venv's
    site-packages): this file as :data:`HOOK` ``.py`` and a ``.pth`` file
    that calls its :func:`install`."""
    shutil.copyfile(__file__, osp.join(site_dir, HOOK + '.py'))
    with open(osp.join(site_dir, HOOK + '.pth'), 'w') as f:
        f.write(f'import {HOOK}; {HOOK}.install()\n')


def remove_hook(site_dir: str) -> None:
    """Remove what :func:`write_hook` wrote into ``site_dir``, if there."""
    for ext in ('.pth', '.py'):
        path = osp.join(site_dir, HOOK + ext)
        if osp.exists(path):
            os.remove(path)


def main(argv=None) -> None:
    """``install SITE_DIR`` or ``remove SITE_DIR``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ('install', 'remove'):
        print(
            'usage: mmcv_ext_standin.py install|remove SITE_DIR',
            file=sys.stderr)
        sys.exit(2)
    (write_hook if argv[0] == 'install' else remove_hook)(argv[1])


if __name__ == '__main__':
    main()
