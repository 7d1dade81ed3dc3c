"""A refused argument costs no heavy import (issue 47): every tool checks
its command line before it imports torch, mmcv, mmseg or the plugin's
components (``mmseg_elliptical.plugin``), so a bad argument is refused at
once, not after the 5 s of those imports (docs/reliability.md, "The
tools").

Each case runs a tool as ``__main__`` in a fresh interpreter, through a
wrapper that prints, as the tool exits, which of those it imported. The
tool must exit with status 2 and its one ``PROG: error:`` line (after
argparse's usage line at most), having imported none of them. The checks'
modules import what they use at their top (issue 61): mmengine's config
reader and registry (no torch), numpy, OpenCV, PIL and prettytable may come
in; matplotlib's pyplot and scipy.stats may not (a figure or a test
imports them, after the checks). The subprocesses stop before the heavy
imports, so each takes a fraction of a second (with a heavy import back at
a tool's top, about 5 s and a failure here)."""
import os
import os.path as osp
import subprocess
import sys
import zipfile

import pytest
from builders import DEMO_DOT, DEMO_ELLIPTICAL, ROOT

#: What a refusal must not import: the heavy stack, the plugin's
#: components (its models, registered by ``mmseg_elliptical.plugin``) and
#: what only figures and statistics load.
HEAVY = ('torch', 'mmcv', 'mmseg', 'mmseg_elliptical.plugin',
         'mmseg_elliptical.models', 'matplotlib.pyplot', 'scipy.stats')
#: ``python -c WRAPPER tools/TOOL ARGS...``: the tool run as ``python
#: tools/TOOL ARGS...`` runs it, then the heavy modules it imported.
WRAPPER = f'''
import runpy, sys
tool, *argv = sys.argv[1:]
sys.argv = [tool, *argv]
try:
    runpy.run_path(tool, run_name='__main__')
finally:
    print('imported:', *sorted(m for m in {HEAVY!r} if m in sys.modules))
'''
#: A test data folder that is not there (the demo's is generated).
NO_DATA = ('--cfg-options test_dataloader.dataset.data_root={tmp}/nodata '
           'test_dataloader.dataset.generate=None')

#: (tool under tools/, command line, what its error line says): one or
#: more bad command lines per tool, each refused before any heavy import.
LIGHT = [
    ('train.py', '{missing}.py', 'argument config: {missing}.py does not '
     'exist'),
    ('train.py', '{ell_cfg} --cfg-options a',
     "argument --cfg-options: 'a' is not KEY=VALUE"),
    ('test.py', '{ell_cfg} {cut}', 'argument checkpoint: Checkpoint {cut} ('),
    ('check_args.py', 'analysis_tools/collapse.py --max-images 0',
     "argument --max-images: '0' is not a positive integer"),
    ('analysis_tools/robustness.py', '{models} --severities 0 6',
     'argument --severities: Unknown severities [0, 6]'),
    ('analysis_tools/robustness.py', '{models} --max-imgs 2',
     'unrecognized arguments: --max-imgs 2'),
    ('analysis_tools/robustness.py', '{ell_cfg} {cut}',
     'argument CONFIG CHECKPOINT: Checkpoint {cut} ('),
    ('analysis_tools/adversarial.py', '{models} --attacks square --norm l2',
     'argument --attacks: the square attack is L-inf only'),
    ('analysis_tools/adversarial.py', '{models} --protocol fast',
     "argument --protocol: invalid choice: 'fast'"),
    ('analysis_tools/certify.py', '{models} --taus 0.99 --samples 100',
     'argument --taus: with n=100 counting draws no pixel can certify'),
    ('analysis_tools/certify.py', '{models} --taus 0.5',
     'the certification cells: tau 0.5 must lie in (0.5, 1)'),
    ('analysis_tools/compare_models.py', '{models} --corruptions all rain',
     "argument --corruptions: Unknown corruption 'rain'"),
    ('analysis_tools/compare_seeds.py', '{dot_cfg} --seeds 1 1',
     'argument --seeds: [1, 1] repeat a seed'),
    ('analysis_tools/collapse.py', '{models} --part neck',
     "argument --part: invalid choice: 'neck'"),
    ('analysis_tools/collapse.py', '{models} --device tpu',
     "argument --device: 'tpu' is not a device"),
    ('analysis_tools/attention_maps.py', '{notes} {models} --point 1 1',
     'argument image: {notes} cannot be read as an image'),
    ('analysis_tools/benchmark.py', '--sizes 0',
     "argument --sizes: '0' is not a positive integer"),
    ('analysis_tools/benchmark_layer.py', '1025 100 3',
     'argument N: DIMS 100 is no multiple of HEADS 3'),
    ('analysis_tools/profile_kernels.py', '--device tpu',
     "argument --device: 'tpu' is not a device"),
    ('analysis_tools/benchmark_overview.py', '{broken}',
     'argument DIR: {broken}/benchmark.json is no JSON file'),
    ('analysis_tools/benchmark_evidence_hook.py', '{dot_cfg} --interval 0',
     "argument --interval: '0' is not a positive integer"),
    ('model_converters/deit2mmseg.py', '{cut} {tmp}/out.pth',
     'argument src: Checkpoint {cut} ('),
    ('deployment/pytorch2onnx.py', '{ell_cfg} --tolerance nan',
     "argument --tolerance: 'nan' is not a finite number > 0"),
    ('deployment/onnx_test.py', '{ell_cfg} {missing}.onnx',
     'argument model: ONNX file {missing}.onnx does not exist'),
]
#: Refused after reading the config (mmengine's reader), still before
#: torch, mmcv, mmseg and the plugin.
CONFIG_READ = [
    ('analysis_tools/collapse.py', '{models} ' + NO_DATA,
     'the test data folder {tmp}/nodata does not exist'),
    ('train.py', '{ell_cfg} --launcher pytorch',
     'start it with tools/dist_train.sh, or drop --launcher'),
]


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """The demo configs, a checkpoint (a zip archive as torch writes one:
    the checks read its structure, not its tensors), the same cut short,
    and files that are not what they claim."""
    tmp = tmp_path_factory.mktemp('refusals')
    ckpt = tmp / 'model.pth'
    with zipfile.ZipFile(ckpt, 'w') as archive:
        archive.writestr('model/data.pkl', b'\x80\x02}q\x00.' * 100)
    (tmp / 'cut.pth').write_bytes(ckpt.read_bytes()[:40])
    (tmp / 'notes.png').write_text('not an image\n')
    (tmp / 'broken').mkdir()
    (tmp / 'broken' / 'benchmark.json').write_text('{"meta": ')
    return dict(
        ell_cfg=DEMO_ELLIPTICAL,
        dot_cfg=DEMO_DOT,
        models=f'{DEMO_ELLIPTICAL} {ckpt} {DEMO_DOT} {ckpt} --names e d',
        tmp=str(tmp),
        cut=str(tmp / 'cut.pth'),
        notes=str(tmp / 'notes.png'),
        broken=str(tmp / 'broken'),
        missing=str(tmp / 'missing'))


def run_refused(tool: str, argv: str, files: dict) -> tuple:
    """Run ``tools/<tool>`` on ``argv`` through :data:`WRAPPER`: its error
    line (after checking status 2, one or two lines, no traceback) and the
    heavy modules it imported."""
    env = {
        k: v
        for k, v in os.environ.items() if k not in ('RANK', 'SLURM_PROCID')
    }
    command = [sys.executable, '-c', WRAPPER, osp.join('tools', tool)]
    proc = subprocess.run(
        command + argv.format(**files).split(),
        cwd=ROOT,
        env=dict(env, OMP_NUM_THREADS='1'),
        capture_output=True,
        text=True,
        timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert 1 <= len(lines) <= 2 and 'Traceback' not in proc.stderr, lines
    assert ': error: ' in lines[-1], lines
    assert len(lines) == 1 or lines[0].startswith('usage: '), lines
    return lines[-1], proc.stdout.split('imported:')[-1].split()


@pytest.mark.parametrize(
    'tool, argv, expected',
    LIGHT,
    ids=[f'{t}-{i}' for i, (t, *_) in enumerate(LIGHT)])
def test_a_bad_argument_is_refused_before_the_heavy_imports(
        tool, argv, expected, files):
    line, imported = run_refused(tool, argv, files)
    assert expected.format(**files) in line, line
    assert imported == [], f'{tool} imported {imported} before refusing'


@pytest.mark.parametrize('tool, argv, expected', CONFIG_READ)
def test_a_config_check_reads_the_config_only(tool, argv, expected, files):
    line, imported = run_refused(tool, argv, files)
    assert expected.format(**files) in line, line
    assert imported == [], f'{tool} imported {imported} before refusing'


def test_every_tool_is_covered():
    """Every tool with a command line has a case above (a new tool gets
    one)."""
    tools = {
        osp.relpath(osp.join(folder, name), osp.join(ROOT, 'tools'))
        for folder, _, names in os.walk(osp.join(ROOT, 'tools'))
        for name in names
        if name.endswith('.py') and 'misc' not in folder.split(os.sep)
    }
    assert tools == {tool for tool, _, _ in LIGHT}
