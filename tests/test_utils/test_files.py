"""``utils/files.py``: a config given where a checkpoint belongs is named
as a config (with the fix: the .pth file, config first), not as a broken
download."""
import shutil

import pytest
from builders import DEMO_ELLIPTICAL
from processes import load_tool, refused

from mmseg_elliptical.errors import CheckpointError
from mmseg_elliptical.utils.files import check_checkpoint


@pytest.mark.parametrize('name', ['config.py', 'model.pth'])
def test_a_config_as_checkpoint_is_named_a_config(name, tmp_path):
    path = str(tmp_path / name)  # also under a checkpoint's name
    shutil.copy(DEMO_ELLIPTICAL, path)
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(path)
    text = str(error.value)
    assert 'it is Python source: a config, not a checkpoint' in text, text
    assert 'config first' in text and 'Download it again' not in text


def test_other_text_is_still_a_broken_download(tmp_path):
    path = tmp_path / 'model.pth'
    path.write_text('<html>404 Not Found</html>\n')
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(str(path))
    text = str(error.value)
    assert "it is a text file (it starts with '<html>404" in text, text
    assert 'Download it again' in text and 'config' not in text


def test_a_tool_given_two_configs(demo_models, capsys):
    tool = load_tool('analysis_tools/collapse.py')
    line = refused(capsys, tool.main, [demo_models[0], demo_models[2]])
    assert f'argument CONFIG CHECKPOINT: Checkpoint {demo_models[2]} (' \
        in line and 'it is Python source: a config' in line, line
