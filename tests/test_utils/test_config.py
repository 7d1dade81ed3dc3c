"""``utils/config.py``: ``model_specs`` / ``model_names`` name the tools'
(config, checkpoint) pairs; ``parse_cfg_options`` reads ``key=value``
strings as mmengine's ``DictAction`` reads ``--cfg-options`` on mmseg's
command lines."""
import argparse

import pytest
from mmengine.config import DictAction

from mmseg_elliptical.utils.config import (model_names, model_specs,
                                           parse_cfg_options)

OPTIONS = [
    'a=1', 'b.c=[1,2]', 'd=(1,2)', 'e=True', 'f=x', 'g=1,2', 'h=1.5', 'i=None',
    'j=[(1,2),(3,4)]', 'a=2'
]


def command_line(options):
    """What mmseg's tools get from ``--cfg-options OPTIONS``."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args(['--cfg-options', *options]).cfg_options


def test_parse_cfg_options_as_the_command_line():
    parsed = parse_cfg_options(OPTIONS)
    assert parsed == command_line(OPTIONS)
    assert parsed == {
        'a': 2,  # the last one wins
        'b.c': [1, 2],
        'd': (1, 2),
        'e': True,
        'f': 'x',
        'g': [1, 2],
        'h': 1.5,
        'i': None,
        'j': [(1, 2), (3, 4)],
    }
    assert [type(parsed[k]) for k in 'aehi'] == [int, bool, float, type(None)]


@pytest.mark.parametrize('options', [None, [], ()])
def test_no_options(options):
    assert parse_cfg_options(options) == {}


@pytest.mark.parametrize('bad', ['novalue', ''])
def test_an_option_without_a_value(bad):
    with pytest.raises(ValueError, match=rf"key=value.*got {bad!r}"):
        parse_cfg_options(['a=1', bad])


def test_model_specs_errors(demo_models):
    with pytest.raises(ValueError, match='pairs'):
        model_specs(demo_models[:3])
    with pytest.raises(ValueError, match='config first'):
        model_specs(demo_models[1::-1])
    with pytest.raises(ValueError, match='does not exist'):
        model_specs([demo_models[0], 'missing.pth'])
    specs = model_specs(demo_models)
    assert [s.name for s in specs] == ['ell', 'dot']


def test_model_names():
    assert model_names(['a/x.py', 'b/y.py']) == ['x', 'y']
    assert model_names(['a/x.py', 'b/x.py']) == ['x#0', 'x#1']
    assert model_names(['a/x.py'], ['ell']) == ['ell']
    with pytest.raises(ValueError, match='2 names for 1'):
        model_names(['a/x.py'], ['p', 'q'])
    with pytest.raises(ValueError, match='must differ'):
        model_names(['a/x.py', 'b/y.py'], ['p', 'p'])
