"""The radius parser every attack caller shares
(:func:`mmseg_elliptical.robustness.attacks.eps.parse_eps`)."""
import pytest

from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.robustness.attacks.eps import eps_units, parse_eps


@pytest.mark.parametrize('value, norm, want', [
    ('8/255', 'linf', 8.),
    ('8 / 255', 'linf', 8.),
    ('1/2', 'linf', 127.5),
    ('4/255', 'l2', 4 / 255),
    ('0.5', 'l2', 0.5),
    (0.03, 'l2', 0.03),
    ('4', 'linf', 4.),
    (8, 'linf', 8.),
    (0, 'linf', 0.),
    ('0.25', 'linf', 0.25),
    ('255', 'linf', 255.),
])
def test_radii_as_written_in_papers(value, norm, want):
    assert parse_eps(value, norm) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize('value, words', [
    ('0.03', "0.03 means 0.03/255 here; for 0.03 of the range give 7.65 "),
    (0.1, '0.1 means 0.1/255 here; for 0.1 of the range give 25.5 '),
    ('0.24', '--allow-small-eps'),
    ('-1', "'-1' is not a radius >= 0"),
    ('nan', "'nan' is not a radius"),
    ('inf', "'inf' is not a radius"),
    ('x', "'x' is not a radius"),
    ('8/0', "'8/0' is not a radius"),
    ('1/2/3', "'1/2/3' is not a radius"),
    ('256', "'256' is above 255"),
    ('2/1', "'2/1' is above 255"),
])
def test_refused_radii(value, words):
    with pytest.raises(ConfigError) as error:
        parse_eps(value, 'linf')
    assert words in str(error.value)
    assert '\n' not in str(error.value)


def test_a_small_radius_when_meant():
    assert parse_eps('0.03', 'linf', allow_small=True) == 0.03
    assert parse_eps('0.1/255', 'linf', allow_small=True) == \
        pytest.approx(0.1)


@pytest.mark.parametrize('value', ['8', 4.5, '255'])
def test_a_large_l2_radius_is_refused_unless_meant(value):
    """An L2 radius is on the 0-1 scale: 8 most likely means 8/255."""
    with pytest.raises(ConfigError) as error:
        parse_eps(value, 'l2')
    eps = float(value)
    assert str(error.value) == (
        f'{value} is an L2 radius of {eps:g} on the 0-1 scale (L2 eps is not '
        f'in 0-255 levels); for a radius of {eps:g}/255 give {eps:g}/255 (= '
        f'{eps / 255:.4g}); --allow-large-eps to mean it')
    assert parse_eps(value, 'l2', allow_large=True) == eps
    assert parse_eps(value, 'linf') == eps  # levels: as written
    assert parse_eps('4', 'l2') == 4.  # the largest taken as written


def test_both_units():
    assert eps_units(8., 'linf') == '8 = 8/255 = 0.03137'
    assert eps_units(0.25, 'linf') == '0.25 = 0.25/255 = 0.0009804'
    assert eps_units(0.5, 'l2') == '0.5'
