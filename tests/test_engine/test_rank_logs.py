"""Under a launcher only rank 0 prints INFO lines: the loggers made before
the process group (at import, by the tool) are quieted on the other ranks,
and the plugin's import line is printed by rank 0 alone."""
import logging
import os
import subprocess
import sys

import pytest
from mmengine.logging import MMLogger

from mmseg_elliptical.engine.launch import quiet_other_ranks

IMPORT_LINE = "with mmengine's own objects allowed"


@pytest.fixture
def logger():
    """A fresh MMLogger with a stream and a file handler; the levels of
    every logger's handlers are restored afterwards."""
    made = MMLogger.get_instance('test_rank_logs', log_level='INFO')
    made.handlers.append(logging.FileHandler('/dev/null'))
    levels = {
        (n, i): h.level
        for n, lg in MMLogger._instance_dict.items()
        for i, h in enumerate(lg.handlers)
    }
    yield made
    for (n, i), level in levels.items():
        MMLogger._instance_dict[n].handlers[i].setLevel(level)
    made.handlers[-1].close()


@pytest.mark.parametrize('rank, stream_level', [(0, logging.INFO),
                                                (1, logging.ERROR)])
def test_quiet_other_ranks(logger, rank, stream_level):
    quiet_other_ranks(rank)
    stream, file = logger.handlers[0], logger.handlers[-1]
    assert type(stream) is logging.StreamHandler
    assert stream.level == stream_level
    assert file.level == logging.NOTSET  # the log file keeps everything


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.parametrize('rank, level, lines', [('0', 'DEBUG', 1),
                                                ('1', 'DEBUG', 0),
                                                ('0', 'INFO', 0)])
def test_the_loader_line_is_rank_0s(rank, level, lines, tmp_path):
    """The checkpoint loader's line: none at import, once at the first
    checkpoint a process loads, on rank 0 alone, and only in a log at
    DEBUG level (at INFO, a tool's default, it prints nothing)."""
    import torch
    path = str(tmp_path / 'w.pth')
    torch.save(dict(state_dict={}), path)
    code = '\n'.join([
        'import mmseg_elliptical', 'print("imported")',
        'from mmengine.logging import MMLogger',
        f'MMLogger.get_instance("tool", log_level={level!r})',
        'from mmengine.runner import CheckpointLoader',
        f'CheckpointLoader.load_checkpoint({path!r})',
        f'CheckpointLoader.load_checkpoint({path!r})'
    ])
    proc = subprocess.run([sys.executable, '-c', code],
                          env=dict(os.environ, RANK=rank, OMP_NUM_THREADS='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    before, _, after = proc.stdout.partition('imported')
    assert IMPORT_LINE not in before, proc.stdout
    assert after.count(IMPORT_LINE) == lines, proc.stdout
