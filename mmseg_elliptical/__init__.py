"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers every component in mmseg's registries, and
installs the weights-only checkpoint loader (docs/reliability.md) and, without
mmdet, placeholders for mmseg's MaskFormer heads (docs/models.md): it imports
:mod:`.plugin`.

Except under a tool that checks its command line first: a script that sets
``__check_arguments_first__ = True`` before its imports (the tools under
``tools/``) gets the package without :mod:`.plugin`, so that its argument
checks (:mod:`.utils.arguments`) run without torch, mmengine's runner and
mmseg, and a bad argument is refused at once; the tool imports
:mod:`.plugin` itself once the arguments have passed.
"""
import sys

from . import _quiet  # noqa: F401 (first: before mmengine is imported)

__version__ = '0.1.0'


def checks_arguments_first() -> bool:
    """Whether the running script (``__main__``, not a multiprocessing
    child's ``__mp_main__``) sets ``__check_arguments_first__ = True``."""
    script = sys.modules.get('__main__')
    return getattr(script, '__name__', None) == '__main__' and getattr(
        script, '__check_arguments_first__', False) is True


if not checks_arguments_first():
    from . import plugin  # noqa: F401 (deferred under a tool: see above)
