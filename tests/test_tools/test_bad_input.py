"""Every tool refuses a bad value of each kind of argument before any work:
exit status 2, one or two lines that name the argument, no traceback.

Each case runs the tool's ``main`` in this process on the tiny demo models
(the checks run before any model is built, so a case takes milliseconds);
``test_the_printed_error`` runs two tools in a fresh interpreter and reads
what a user sees."""
import json
import os
import os.path as osp
import sys

import pytest
from onnx_builders import onnx_files
from processes import load_tool, refused, run_tool_main

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.deploy import missing_packages


@pytest.fixture(scope='module')
def files(demo_models, tmp_path_factory):
    """The demo twins and bad files: missing, empty, cut short, text."""
    tmp = tmp_path_factory.mktemp('bad')
    ckpt = demo_models[1]
    with open(ckpt, 'rb') as f:
        data = f.read()
    (tmp / 'cut.pth').write_bytes(data[:len(data) // 3])
    (tmp / 'empty.pth').write_bytes(b'')
    (tmp / 'page.pth').write_text('<html>404 Not Found</html>\n')
    (tmp / 'notes.png').write_text('not an image\n')
    (tmp / 'run').mkdir()
    (tmp / 'broken').mkdir()
    (tmp / 'broken' / 'benchmark.json').write_text('{"meta": ')
    if not missing_packages():  # the onnx_test cases skip without
        onnx_files(tmp)
    return dict(
        ell=' '.join(demo_models[:2]),
        ell_cfg=demo_models[0],
        ell_ckpt=demo_models[1],
        dot_cfg=demo_models[2],
        models=' '.join(demo_models),
        tmp=str(tmp),
        cut=str(tmp / 'cut.pth'),
        empty=str(tmp / 'empty.pth'),
        page=str(tmp / 'page.pth'),
        notes=str(tmp / 'notes.png'),
        missing=str(tmp / 'missing.pth'),
        run=str(tmp / 'run'),
        broken=str(tmp / 'broken'),
        page_onnx=str(tmp / 'page.onnx'),
        empty_onnx=str(tmp / 'empty.onnx'),
        apart_onnx=str(tmp / 'apart.onnx'),
        good_onnx=str(tmp / 'good.onnx'))


def image_of(demo_root: str) -> str:
    return osp.join(demo_root, 'images', 'validation', 'demo_00000.jpg')


#: (tool, command line from the files, what the error line must say).
CASES = {
    'robustness': ('analysis_tools/robustness.py', [
        ('{models} --max-images -1', "argument --max-images: '-1' is not a "
         'positive integer'),
        ('{models} --severities 0 6',
         'argument --severities: Unknown severities [0, 6]; valid are 1-5'),
        ('{models} --corruptions rain', "argument --corruptions: Unknown "
         "corruption 'rain'; valid are gaussian_noise"),
        ('{models} --baseline x', "argument --baseline: 'x' is none of the "
         "models ['ell', 'dot']"),
        ('{models} --protocol cityscapes',
         "argument --protocol: invalid choice: 'cityscapes'"),
        ('{models} --resamples 0', 'argument --resamples'),
        ('{models} --names a', 'argument --names: --names gives 1 names for '
         '2 models'),
        ('{ell_cfg} {cut}', 'argument CONFIG CHECKPOINT: Checkpoint {cut} ('),
        ('{ell_cfg} {missing}',
         'argument CONFIG CHECKPOINT: checkpoint {missing} does not exist'),
        ('{ell_cfg}', 'argument CONFIG CHECKPOINT: models must come as '
         'CONFIG CHECKPOINT pairs, got 1 paths'),
        ('{models} --cfg-options model.pretrained',
         "argument --cfg-options: 'model.pretrained' is not KEY=VALUE"),
    ]),
    'collapse': ('analysis_tools/collapse.py', [
        ('{models} --max-images 0', 'argument --max-images'),
        ('{models} --part neck', "argument --part: invalid choice: 'neck'"),
        ('{models} --device cuda:7', 'argument --device: cuda:7 is not '
         'available here'),
        ('{models} --device tpu', "argument --device: 'tpu' is not a device"),
        ('{ell_cfg} {page}', 'is not a complete torch checkpoint: it is a '
         'text file'),
        ('{ell_cfg} {empty}', 'is not a complete torch checkpoint: it is '
         'empty'),
        ('{page} {ell_ckpt}', 'is not a config (.py) file'),
    ]),
    'attention_maps': ('analysis_tools/attention_maps.py', [
        ('{notes} {models} --point 1 1', 'argument image: {notes} cannot be '
         'read as an image'),
        ('{missing} {models} --point 1 1',
         'argument image: {missing} does not exist'),
        ('{image} {models} --point 1 -1', "argument --point: '-1' is not an "
         'integer >= 0'),
        ('{image} {models} --point 64 1',
         'argument --point: (64, 1) lies outside the 64 x 64 image'),
        ('{image} {models} --point 1 1 --layers x',
         "argument --layers: 'x' is not an integer >= 0"),
        ('{image} {models}', 'the following arguments are required: --point'),
    ]),
    'compare_models': ('analysis_tools/compare_models.py', [
        ('{ell}', 'argument CONFIG CHECKPOINT: the report compares two or '
         'more models, got 1'),
        ('{models} --speed-size 0', 'argument --speed-size'),
        ('{models} --baseline x', "argument --baseline: 'x' is none of the "
         "models ['ell', 'dot']"),
        ('{models} --image {notes}', 'argument --image: {notes} cannot be '
         'read as an image'),
        ('{models} --severities 6', 'argument --severities: Unknown '
         'severities [6]'),
        ('{models} --heads -1', 'argument --heads'),
        ('{models} --corruptions all rain', 'argument --corruptions'),
    ]),
    'compare_seeds': ('analysis_tools/compare_seeds.py', [
        ('{missing}', 'argument configs: {missing} does not exist'),
        ('{dot_cfg} --seeds -1', "argument --seeds: '-1' is not an integer "
         '>= 0'),
        ('{dot_cfg} --seeds 1 1', 'argument --seeds: [1, 1] repeat a seed'),
        ('{dot_cfg} --names a b', '2 names for 1 configs'),
        ('{dot_cfg} --cfg-options a', "argument --cfg-options: 'a' is not "
         'KEY=VALUE'),
    ]),
    'benchmark': ('analysis_tools/benchmark.py', [
        ('{missing}', 'argument configs: {missing} does not exist'),
        ('{notes}', 'argument configs: {notes} is not a config (.py) file'),
        ('--sizes 0', "argument --sizes: '0' is not a positive integer"),
        ('--rounds 0', 'argument --rounds'),
        ('--min-run-time -1', "argument --min-run-time: '-1' is not a "
         'finite number >= 0'),
        ('--device cuda', 'argument --device: cuda is not available here'),
        ('{dot_cfg} --names a b',
         'argument --names: --names gives 2 names for '
         '1 models'),
        ('--sizes 64 --train-sizes 32', '--train-sizes must be among --sizes'),
        ('--roles all', "argument --roles: invalid choice: 'all'"),
    ]),
    'benchmark_layer': ('analysis_tools/benchmark_layer.py', [
        ('1025 100 3', 'argument N: DIMS 100 is no multiple of HEADS 3'),
        ('1025 192', 'argument N: [1025, 192]: give TOKENS DIMS HEADS'),
        ('0 192 3', "argument N: '0' is not a positive integer"),
        ('--batch-size 0', 'argument --batch-size'),
    ]),
    'benchmark_overview': ('analysis_tools/benchmark_overview.py', [
        ('{run}', 'argument DIR: no benchmark.json in {run}'),
        ('{broken}', 'argument DIR: {broken}/benchmark.json is no JSON file'),
    ]),
    'deit2mmseg': ('model_converters/deit2mmseg.py', [
        ('{missing} {tmp}/out.pth', 'argument src: {missing} does not exist'),
        ('{cut} {tmp}/out.pth', 'argument src: Checkpoint {cut} ('),
        ('{ell_ckpt} {tmp}', 'argument dst: {tmp} is a folder'),
    ]),
    'pytorch2onnx': ('deployment/pytorch2onnx.py', [
        ('{missing}', 'argument config: {missing} does not exist'),
        ('{ell_cfg} --shape 0 64', "argument --shape: '0' is not a positive "
         'integer'),
        ('{ell_cfg} --shape 64 64 3', 'argument --shape: [64, 64, 3]: give '
         'HEIGHT WIDTH'),
        ('{ell_cfg} --checkpoint {cut}',
         'argument --checkpoint: Checkpoint {cut} ('),
        ('{ell_cfg} --tolerance 0', "argument --tolerance: '0' is not a "
         'finite number > 0'),
        ('{ell_cfg} --tolerance nan', 'argument --tolerance'),
        ('{ell_cfg} --opset-version 11', 'argument --opset-version: 11 is '
         'below 18'),
        ('{ell_cfg} --output-file {tmp}', 'argument --output-file: {tmp} is '
         'a folder'),
        ('{ell_cfg} --threads -1', 'argument --threads'),
        ('{ell_cfg} --cfg-options x', "argument --cfg-options: 'x' is not "
         'KEY=VALUE'),
    ]),
    'onnx_test': ('deployment/onnx_test.py', [
        ('{ell_cfg} {missing}.onnx',
         'argument model: ONNX file {missing}.onnx does not exist'),
        ('{ell_cfg} {page_onnx}', 'argument model: {page_onnx} (27 bytes) is '
         'not an ONNX model: it does not parse as one'),
        ('{ell_cfg} {empty_onnx}', 'argument model: {empty_onnx} (0 bytes) '
         'is not an ONNX model: it is empty'),
        ('{ell_cfg} {apart_onnx}', 'argument model: {apart_onnx} keeps its '
         'weights in apart.onnx.data, which is not beside it'),
        ('{notes} {good_onnx}', 'argument config: {notes} is not a config'),
        ('{ell_cfg} {good_onnx} --checkpoint {empty}',
         'argument --checkpoint: Checkpoint {empty} ('),
        ('{ell_cfg} {good_onnx} --tolerance -1', 'argument --tolerance'),
        ('{ell_cfg} {good_onnx} --work-dir {notes}',
         'argument --work-dir: {notes} is a file'),
    ]),
}
#: What reads an ONNX file's content needs onnx (the deploy extra).
NEEDS_ONNX = ('onnx_test', )


def cases():
    for tool, (path, items) in CASES.items():
        marks = pytest.mark.skipif(
            tool in NEEDS_ONNX and bool(missing_packages()),
            reason='needs the deploy extra')
        for i, (argv, expected) in enumerate(items):
            yield pytest.param(
                path, argv, expected, id=f'{tool}-{i}', marks=marks)


@pytest.mark.parametrize('path, argv, expected', list(cases()))
def test_a_bad_argument_is_refused_at_the_door(path, argv, expected, files,
                                               demo_root, capsys, monkeypatch):
    values = dict(files, image=image_of(demo_root))
    argv = argv.format(**values).split()
    forbid_work(monkeypatch)
    line = refused(capsys, load_tool(path).main, argv)
    assert expected.format(**values) in line, line


def forbidden(*args, **kwargs):
    raise AssertionError('work started before the arguments were checked')


def forbid_work(monkeypatch) -> None:
    """Nothing may be built, loaded or run: the checks come first."""
    from mmseg.registry import MODELS
    for target in ('mmengine.runner.Runner.from_cfg', 'mmseg.apis.init_model'):
        monkeypatch.setattr(target, forbidden)
    monkeypatch.setattr(MODELS, 'build', forbidden)


@pytest.mark.parametrize('tool, argv, expected', [
    ('train.py', ['{missing}.py'], 'argument config: {missing}.py does not '
     'exist'),
    ('train.py', ['{ell_cfg}', '--cfg-options', 'a'
                  ], "argument --cfg-options: 'a' is not KEY=VALUE"),
    ('test.py', ['{ell_cfg}', '{cut}'], 'argument checkpoint: Checkpoint '
     '{cut} ('),
    ('test.py', ['{ell_cfg}', '{page}'], 'argument checkpoint: Checkpoint '
     '{page} ('),
    ('test.py', ['{page}', '{ell_ckpt}'
                 ], 'argument config: {page} is not a config (.py) file'),
])
def test_train_and_test_check_their_files(tool, argv, expected, files, capsys,
                                          monkeypatch):
    argv = [a.format(**files) for a in argv]
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, tool, *args), argv)
    assert expected.format(**files) in line, line


def test_an_unreadable_checkpoint_in_a_running_tool(files, capsys,
                                                    monkeypatch):
    """A checkpoint that turns unreadable after the checks ends mmseg's own
    test.py through the plugin's loader with one line, not a traceback."""
    for checks in ('engine.launch.check_mmseg_tool_args',
                   'utils.mmseg_tools.check_mmseg_tool_command'):
        monkeypatch.setattr(f'mmseg_elliptical.{checks}', lambda *args: None)
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, 'test.py', *args),
                   [files['ell_cfg'], files['cut']])
    assert f'Checkpoint {files["cut"]} (' in line
    assert 'is not a complete torch checkpoint: it is cut short' in line


def test_a_refused_model_argument_in_a_running_tool(files, capsys, tmp_path):
    """A config whose model the plugin refuses (here a layer index out of
    range) ends the robustness tool with the plugin's message."""
    tool = load_tool('analysis_tools/robustness.py')
    line = refused(
        capsys, tool.main, files['ell'].split() + [
            '--corruptions', 'fog', '--severities', '1', '--max-images', '1',
            '--work-dir',
            str(tmp_path), '--cfg-options',
            'model.backbone.elliptical_layers=[9]'
        ])
    assert 'elliptical_layers=[9] contains [9]' in line


@pytest.mark.slow
def test_the_printed_error(files):
    """What a user sees in a terminal: the error line, no traceback."""
    import subprocess

    from builders import ROOT
    env = dict(os.environ, OMP_NUM_THREADS='1')
    for argv, expected in (
        (['tools/train.py', 'no_such_config.py'],
         'train.py: error: argument config: no_such_config.py does not '
         'exist'),
        ([
            'tools/analysis_tools/robustness.py', files['ell_cfg'],
            files['cut']
        ], f'robustness.py: error: argument CONFIG CHECKPOINT: Checkpoint '
         f'{files["cut"]} ('),
    ):
        proc = subprocess.run([sys.executable, *argv],
                              cwd=ROOT,
                              env=env,
                              capture_output=True,
                              text=True,
                              timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert expected in proc.stderr and 'Traceback' not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize('argv', [
    ['tools/train.py', 'no_such_config.py'],
    ['tools/analysis_tools/robustness.py', '--max-images', '-1'],
    ['-c', 'import mmseg_elliptical'],
])
def test_a_start_prints_nothing_it_was_not_asked_for(argv):
    """No ``pkg_resources`` deprecation warnings (four at every start, from
    mmengine's and mmseg's imports) and no INFO line of the checkpoint
    loader at import: a refusal is its usage and error lines, an import
    prints nothing."""
    import subprocess

    from builders import ROOT
    proc = subprocess.run([sys.executable, *argv],
                          cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    if argv[0] == '-c':
        assert proc.returncode == 0 and not lines, lines
    else:
        assert proc.returncode == 2 and 1 <= len(lines) <= 2, lines
        assert ': error: ' in lines[-1] and (
            len(lines) == 1 or lines[0].startswith('usage: ')), lines


#: The run around a tool: output folder, data folder, launcher.
NO_DATA = ('--cfg-options test_dataloader.dataset.data_root={tmp}/nodata '
           'test_dataloader.dataset.generate=None')


@pytest.mark.parametrize('path, script', [
    ('analysis_tools/adversarial.py', 'tools/dist_adversarial.sh'),
    ('analysis_tools/certify.py', 'tools/dist_certify.sh'),
    ('analysis_tools/robustness.py', 'tools/dist_robustness.sh'),
    ('analysis_tools/collapse.py',
     'tools/dist_launch.sh analysis_tools/collapse.py NPROC'),
    ('analysis_tools/compare_models.py',
     'tools/dist_launch.sh analysis_tools/compare_models.py NPROC'),
])
@pytest.mark.parametrize(
    'argv, expected', [
        ('{models} --work-dir {notes}', '--work-dir {notes} is a file, not a '
         'folder'),
        ('{models} ' + NO_DATA, 'the test data folder {tmp}/nodata does not '
         'exist; put the dataset there or point --cfg-options '
         'test_dataloader.dataset.data_root=DIR at it'),
        ('{models} --launcher pytorch', '--launcher pytorch expects the '
         'environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, '
         'MASTER_PORT); start it with {script}, or drop --launcher'),
    ],
    ids=['work-dir', 'data', 'launcher'])
def test_the_run_around_a_tool_is_checked_at_the_door(path, script, argv,
                                                      expected, files, capsys,
                                                      monkeypatch):
    values = dict(files, script=script)
    monkeypatch.delenv('RANK', raising=False)
    forbid_work(monkeypatch)
    line = refused(capsys, load_tool(path).main, argv.format(**values).split())
    assert expected.format(**values) in line, line


@pytest.mark.parametrize('tool, argv, expected', [
    ('test.py', '{ell_cfg} {ell_ckpt} --work-dir {notes}',
     '--work-dir {notes} is a file'),
    ('test.py', '{ell_cfg} {ell_ckpt} ' + NO_DATA,
     'the test data folder {tmp}/nodata does not exist'),
    ('train.py', '{ell_cfg} --cfg-options '
     'train_dataloader.dataset.data_root={tmp}/nodata '
     'train_dataloader.dataset.generate=None',
     'the train data folder {tmp}/nodata does not exist'),
    ('test.py', '{ell_cfg} {ell_ckpt} --launcher pytorch',
     'start it with tools/dist_test.sh, or drop --launcher'),
    ('train.py', '{ell_cfg} --launcher pytorch',
     'start it with tools/dist_train.sh, or drop --launcher'),
    ('train.py', '{ell_cfg} --launcher slurm',
     '--launcher slurm expects the environment of a task started by srun '
     '(SLURM_PROCID, SLURM_NTASKS, SLURM_NODELIST); start it with '
     'tools/slurm_train.sh, or drop --launcher'),
])
def test_the_run_around_train_and_test(tool, argv, expected, files, capsys,
                                       monkeypatch):
    monkeypatch.delenv('RANK', raising=False)
    monkeypatch.delenv('SLURM_PROCID', raising=False)
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, tool, *args),
                   argv.format(**files).split())
    assert expected.format(**files) in line, line


def test_check_args_leaves_the_launcher_to_torchrun(files, monkeypatch):
    """``tools/dist_launch.sh`` checks the command line before torchrun
    sets the environment: the launcher is not refused there."""
    from builders import ROOT
    monkeypatch.delenv('RANK', raising=False)
    check = load_tool('check_args.py')
    monkeypatch.setattr('mmseg_elliptical.utils.preflight.LAUNCHING', False)
    monkeypatch.setattr('mmseg_elliptical.engine.fit.check_models_fit',
                        lambda *args: [])
    check.main([
        'analysis_tools/collapse.py', '--launcher', 'pytorch',
        *files['models'].split()
    ])
    assert osp.isdir(osp.join(ROOT, 'tools'))


@pytest.mark.parametrize('path, store', [
    ('analysis_tools/adversarial.py', 'adversarial.json'),
    ('analysis_tools/certify.py', 'certify.json'),
    ('analysis_tools/robustness.py', 'robustness.json'),
])
def test_a_grid_file_of_another_model_is_refused_at_the_door(
        path, store, files, tmp_path, capsys, monkeypatch):
    """A grid file that holds model 'ell' from another config: refused
    before any model is built (under torchrun: before the processes start,
    as ``tools/check_args.py``), in the grid's own words."""
    from mmseg_elliptical.errors import GridError
    from mmseg_elliptical.robustness.grid.store import ResultStore
    from mmseg_elliptical.utils.preflight import model_identity
    grid = tmp_path / store
    grid.write_text(
        json.dumps(
            dict(
                settings={},
                models=dict(
                    ell=dict(
                        model_identity(files['dot_cfg'], files['ell_ckpt']),
                        cells={})))))
    monkeypatch.delenv('RANK', raising=False)
    forbid_work(monkeypatch)
    argv = f'{files["models"]} --work-dir {tmp_path}'.split()
    line = refused(capsys, load_tool(path).main, argv)
    with pytest.raises(GridError) as grid_says:
        ResultStore(str(grid), {}).add_model('ell', files['ell_cfg'],
                                             files['ell_ckpt'])
    assert line.endswith(str(grid_says.value)), line
    assert f"{grid} holds results of model 'ell' from" in line
