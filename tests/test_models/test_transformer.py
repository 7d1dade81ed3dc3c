"""``models/transformer.py``: what every elliptical backbone and head shares;
its forward (the input checks, then mmseg's) walks no modules."""
import pytest
import torch
import torch.nn as nn
from builders import TINY_MODELS

pytestmark = pytest.mark.usefixtures('single_thread')


@pytest.mark.parametrize('family', sorted(TINY_MODELS))
@pytest.mark.parametrize('train', [False, True], ids=['infer', 'train'])
def test_default_forward_walks_no_modules(family, train, monkeypatch):
    """The expected input channels are found once when the model is built;
    a forward (with the default ``check_finite``) calls neither
    ``modules()`` nor ``children()`` nor their named versions."""
    tiny = TINY_MODELS[family]
    model = tiny.cls(**tiny.args).train(train)
    x = torch.randn(*tiny.shape)
    inputs = [x] if family == 'head' else x
    walks = []
    for name in ('named_modules', 'named_children'):
        original = getattr(nn.Module, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            walks.append((_name, type(self).__name__))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(nn.Module, name, counted)
    assert list(model.modules())  # the spies count
    walks.clear()
    with torch.set_grad_enabled(train):
        model(inputs)
    assert walks == []
    expected = 24 if family == 'head' else 3
    assert model.in_channels_expected == expected
