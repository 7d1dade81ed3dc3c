"""The keyword arguments a class takes, and the one-line error for one it
does not take, with the closest name (the models' and the hooks' checks)."""
import difflib
import inspect
from typing import List, Sequence, Tuple

from ..errors import UnknownArgumentError


def init_keywords(cls: type,
                  whole_mro: bool = False) -> Tuple[List[str], bool]:
    """The keyword names of the ``__init__`` s along ``cls.__mro__``, up to
    the first without ``**kwargs``.

    Args:
        cls (type): The class.
        whole_mro (bool): Read every class of the MRO.

    Returns:
        tuple[list[str], bool]: The names in MRO order, and whether an
        ``__init__`` without ``**kwargs`` was met.
    """
    names: List[str] = []
    closed = False
    for klass in cls.__mro__:
        if '__init__' not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        names += [
            n for n, p in params.items()
            if n != 'self' and p.kind in (p.POSITIONAL_OR_KEYWORD,
                                          p.KEYWORD_ONLY)
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            closed = True
            if not whole_mro:
                break
    return names, closed


def unknown_keyword_error(owner: str, name: str,
                          valid: Sequence[str]) -> UnknownArgumentError:
    """The error for keyword ``name``, which none of ``valid`` is: the
    closest valid name, or all of them.

    Args:
        owner (str): What got it, as the message names it (a class name).
        name (str): The keyword given.
        valid (Sequence[str]): The keywords ``owner`` takes.
    """
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else (
        f'; valid are {sorted(set(valid))}.')
    return UnknownArgumentError(
        f'{owner} got an unexpected keyword argument {name!r}{hint}')
