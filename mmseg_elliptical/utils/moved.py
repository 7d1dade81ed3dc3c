"""Old module paths that keep working for one release: importing one warns
with its new path and gives the new module (CHANGELOG.md lists the moves)."""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Dict, Optional


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder for the modules a package moved: ``{old: new}`` absolute
    module names. ``import old`` imports ``new``, registers it under
    ``old`` too and emits a :class:`DeprecationWarning` naming ``new``.

    Args:
        moved (dict): ``{old module: new module}``.
    """

    def __init__(self, moved: Dict[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> object:
        new = self.moved[spec.name]
        warnings.warn(
            f'{spec.name} moved to {new}; the old path goes in the next '
            'release: import the new one.',
            DeprecationWarning,
            stacklevel=3)
        module = importlib.import_module(new)
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module) -> None:
        """The module is the new one, executed already."""


def alias_moved(moved: Dict[str, str]) -> Optional[MovedModules]:
    """Install a :class:`MovedModules` finder for ``moved`` (once per set of
    names; it answers only for those names)."""
    if any(
            isinstance(f, MovedModules) and f.moved == moved
            for f in sys.meta_path):
        return None
    finder = MovedModules(moved)
    sys.meta_path.append(finder)
    return finder
