"""Fixtures of the analysis tests: tiny models saved as config and
checkpoint (see :mod:`.builders`)."""
import pytest

from .builders import (DEMO_DOT, DEMO_ELLIPTICAL, FAMILIES, demo_config,
                       family_config, save_model)


@pytest.fixture(scope='session')
def demo_models(demo_root, tmp_path_factory):
    """Config and random-weight checkpoint of a tiny elliptical demo model
    and its dot-product twin (same weights).

    Returns:
        list[str]: ``[config, checkpoint, config, checkpoint]``.
    """
    tmp = tmp_path_factory.mktemp('demo_models')
    paths = []
    for name, path in (('ell', DEMO_ELLIPTICAL), ('dot', DEMO_DOT)):
        cfg = demo_config(path, demo_root, str(tmp / f'wd_{name}'))
        paths += save_model(cfg, str(tmp / f'{name}.py'))
    return paths


@pytest.fixture(scope='session')
def family_models(demo_root, tmp_path_factory):
    """``{family: [config, checkpoint]}`` of every tiny family model."""
    tmp = tmp_path_factory.mktemp('family_models')
    return {
        family:
        save_model(
            family_config(family, demo_root, str(tmp / f'wd_{family}')),
            str(tmp / f'{family}.py'))
        for family in FAMILIES
    }
