"""One spelling of the output folder across the plugin's tools: mmseg's
``--work-dir``, with the old ``--out-dir`` kept as an alias."""
import json

import pytest
from processes import load_tool

#: Tool, the rest of a valid command line, its old spelling (None: none).
TOOLS = [
    ('analysis_tools/collapse.py', '{models}', '--out-dir'),
    ('analysis_tools/benchmark.py', '{dot_cfg}', '--out-dir'),
    ('analysis_tools/benchmark_layer.py', '', '--out-dir'),
    ('analysis_tools/benchmark_overview.py', '{run}', '--out-dir'),
    ('analysis_tools/benchmark_evidence_hook.py', '{dot_cfg}', None),
    ('analysis_tools/robustness.py', '{models}', None),
    ('analysis_tools/compare_models.py', '{models}', None),
    ('analysis_tools/attention_maps.py', '{image} {models} --point 1 1', None),
]


@pytest.mark.parametrize('path, argv, old', TOOLS)
def test_every_tool_takes_work_dir(path, argv, old, demo_models, demo_root,
                                   tmp_path):
    run = tmp_path / 'run'
    run.mkdir()
    (run / 'benchmark.json').write_text(json.dumps({'meta': {}, 'ratios': []}))
    argv = argv.format(
        models=' '.join(demo_models),
        dot_cfg=demo_models[2],
        run=run,
        image=f'{demo_root}/images/validation/demo_00000.jpg').split()
    tool = load_tool(path)
    for option in ('--work-dir', old):
        if option is not None:
            args = tool.parse_args(argv + [option, str(tmp_path / 'out')])
            assert args.work_dir == str(tmp_path / 'out'), option
