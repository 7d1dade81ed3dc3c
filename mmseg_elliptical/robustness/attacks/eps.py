"""Attack radii as papers write them: :func:`parse_eps` reads one (L-inf in
0-255 levels or ``N/255``, L2 on the 0-1 scale), :func:`eps_units` writes an
L-inf one in both units. The adversarial tool and the adversarial-training
hook read eps through it."""
from typing import Union

from ...errors import ConfigError

#: The smallest L-inf radius in the literature (SEA's 0.25/255), in levels.
SMALLEST_LINF_EPS = 0.25
#: The largest L2 radius (0-1 scale) taken without ``allow_large``: above
#: RobustBench's ImageNet radius (3); ``8`` most likely means 8/255.
LARGEST_L2_EPS = 4.


def parse_eps(value: Union[float, int, str],
              norm: str = 'linf',
              allow_small: bool = False,
              allow_large: bool = False) -> float:
    """An attack radius as written in papers or on a command line: L-inf in
    0-255 levels (``8`` or ``'8/255'``), L2 on the 0-1 scale (``0.5``);
    ``'N/D'`` is the fraction N/D of the image range.

    Args:
        value (float | int | str): The radius.
        norm (str): ``'linf'`` or ``'l2'``.
        allow_small (bool): Take an L-inf radius in (0, 0.25) levels as
            written (``0.03`` most likely means 7.65 levels).
        allow_large (bool): Take an L2 radius above
            :data:`LARGEST_L2_EPS` as written (``8`` most likely means
            8/255 of the range).

    Returns:
        float: L-inf in levels, L2 on the 0-1 scale.

    Raises:
        ConfigError: Not a number or fraction, negative, above 255, or
            a small L-inf radius without ``allow_small``, a large L2 one
            without ``allow_large``.
    """
    text = str(value).strip()
    try:
        if isinstance(value, str) and '/' in text:
            top, bottom = (float(t) for t in text.split('/'))
            eps = top * (255 if norm == 'linf' else 1) / bottom
        else:
            eps = float(value)
    except (ValueError, ZeroDivisionError):
        eps = float('nan')
    if not 0 <= eps < float('inf'):
        raise ConfigError(f'{text!r} is not a radius >= 0 (a number, or a '
                          'fraction such as 8/255)')
    if eps > 255:
        raise ConfigError(f'{text!r} is above 255 (eps is in 0-255 levels '
                          'for linf, 0-1 for l2)')
    if norm == 'linf' and 0 < eps < SMALLEST_LINF_EPS and not allow_small:
        raise ConfigError(
            f'{text} means {eps:g}/255 here; for {eps:g} of the range give '
            f'{round(eps * 255, 4):g} (L-inf eps is in 0-255 levels, or '
            'write N/255); --allow-small-eps to mean it')
    if norm == 'l2' and eps > LARGEST_L2_EPS and not allow_large:
        raise ConfigError(
            f'{text} is an L2 radius of {eps:g} on the 0-1 scale (L2 eps is '
            'not in 0-255 levels); for a radius of {0}/255 give {0}/255 '
            '(= {1:.4g}); --allow-large-eps to mean it'.format(
                f'{eps:g}', eps / 255))
    return eps


def eps_units(eps: float, norm: str = 'linf') -> str:
    """An L-inf radius in both units (``'8 = 8/255 = 0.0314'``); an L2
    radius as it is."""
    return f'{eps:g} = {eps:g}/255 = {eps / 255:.4g}' if norm == 'linf' \
        else f'{eps:g}'
