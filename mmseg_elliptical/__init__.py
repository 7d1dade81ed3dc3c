"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers the plugin (:mod:`.plugin`), except in the
process of a script that declares ``__check_arguments_first__ = True``
before its imports (every tool): read here, once, from ``__main__``; the
tool checks its command line without torch and mmseg, then imports
:mod:`.plugin` in its ``main``. A child process (``__mp_main__``, a
subprocess) registers on import (docs/reliability.md, "The tools").
"""
import sys

from . import _quiet  # noqa: F401 (first: before mmengine is imported)

__version__ = '0.1.0'


def checks_arguments_first() -> bool:
    """Whether ``__main__`` (not ``__mp_main__``) checks arguments first."""
    script = sys.modules.get('__main__')
    return getattr(script, '__name__', None) == '__main__' and getattr(
        script, '__check_arguments_first__', False) is True


if not checks_arguments_first():
    from . import plugin  # noqa: F401 (deferred under a tool: see above)
