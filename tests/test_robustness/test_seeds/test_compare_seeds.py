"""compare_seeds.py's runs (``robustness/seeds/compare.py``,
``training.py``, ``layout.py``): each seed trained once, resumable, its job's
function pickled by reference; ``runs.py``: the history they read, the
statistics over seeds, the table; the tool end to end."""
import functools
import json
import os
import os.path as osp
import pickletools
import subprocess
from glob import glob

import numpy as np
import pytest
import seed_fakes
import submitit
from builders import (DEMO_DOT, DEMO_ELLIPTICAL, TINY_GENERATE,
                      demo_data_options)
from mmengine.config import Config
from processes import load_tool

from mmseg_elliptical.robustness.seeds import compare, layout, training
from mmseg_elliptical.robustness.seeds.runs import (markdown, read_history,
                                                    seed_statistics)
from mmseg_elliptical.utils import cluster, load_config

TESTS = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def tool():
    return load_tool('analysis_tools/compare_seeds.py')


def _scalars(run_dir, stamp, records):
    folder = osp.join(run_dir, stamp, 'vis_data')
    os.makedirs(folder)
    with open(osp.join(folder, 'scalars.json'), 'w') as f:
        f.write(''.join(json.dumps(r) + '\n' for r in records))


def test_read_history_merges_restarts(tmp_path):
    run = str(tmp_path)
    _scalars(
        run,
        '20240101_000000',
        [
            dict(loss=1.0, lr=0.1, iter=1,
                 step=1),  # training: not a validation
            dict(mIoU=10.0, aAcc=50.0, time=0.1, data_time=0.01, step=2),
            dict(mIoU=20.0, step=4),
        ])
    # a resumed run logs iteration 4 again, then goes on
    _scalars(run, '20240101_010000',
             [dict(mIoU=25.0, step=4),
              dict(mIoU=30.0, step=6)])
    assert read_history(run) == {
        2: dict(mIoU=10.0, aAcc=50.0),
        4: dict(mIoU=25.0),
        6: dict(mIoU=30.0)
    }


def test_seed_statistics_are_the_sample_statistics():
    values = [71.5, 80.25, 77.0, 69.125]
    runs = [_result('m', seed, {'mIoU': v}) for seed, v in enumerate(values)]
    stats = seed_statistics(runs)['m']['mIoU']
    assert stats['mean'] == pytest.approx(np.mean(values))
    assert stats['std'] == pytest.approx(np.std(values, ddof=1))
    assert stats['n'] == 4
    one = seed_statistics([_result('m', 0, {'mIoU': 3.0})])['m']['mIoU']
    assert one['mean'] == 3.0 and np.isnan(one['std'])
    # A class absent from the validation images: mmseg logs its IoU as NaN.
    absent = seed_statistics([
        _result('m', s, {
            'mIoU': 1.0 + s,
            'IoU.ring': v
        }) for s, v in enumerate([float('nan'), 2.0])
    ])['m']
    assert absent['mIoU']['std'] == pytest.approx(np.std([1, 2], ddof=1))
    assert np.isnan(absent['IoU.ring']['mean'])
    assert np.isnan(absent['IoU.ring']['std'])


def _result(name, seed, finals, earlier=1.0):
    return dict(
        name=name,
        seed=seed,
        seconds=60.0 * (seed + 1),
        history={
            '2': {
                k: earlier
                for k in finals
            },
            '4': finals
        })


def test_summary_and_table_use_the_last_validation():
    rng = np.random.default_rng(0)
    results, finals = [], {}
    for name in ('ell', 'dot'):
        for seed in range(3):
            values = {
                'mIoU': float(rng.uniform(50, 90)),
                'aAcc': 99.0,
                'IoU.disc': float(rng.uniform(50, 90)),
                'IoU.ring': float(rng.uniform(50, 90))
            }
            finals.setdefault(name, []).append(values)
            results.append(_result(name, seed, values))
    summary = seed_statistics(results)
    assert list(summary) == ['ell', 'dot']
    table = markdown(summary, results)
    lines = [[c.strip() for c in line.strip('|').split('|')]
             for line in table.splitlines()]
    assert lines[0] == ['model', 'seeds', 'mIoU', 'disc', 'ring', 'min/run']
    for name, row in zip(('ell', 'dot'), lines[2:]):
        assert list(summary[name]) == ['mIoU', 'IoU.disc', 'IoU.ring']
        cells = [name, '3']
        for key in ('mIoU', 'IoU.disc', 'IoU.ring'):
            values = [v[key] for v in finals[name]]
            assert summary[name][key]['mean'] == pytest.approx(np.mean(values))
            assert summary[name][key]['std'] == pytest.approx(
                np.std(values, ddof=1))
            cells.append(f'{np.mean(values):.2f} ± '
                         f'{np.std(values, ddof=1):.2f}')
        assert row == cells + ['2.0']  # minutes: (1 + 2 + 3) / 3


def fake_configs(edits):
    """``load_config``'s stand-in: a 4-iteration config per file, its
    content ``edits[config]``."""

    def load_config(config, options=None):
        cfg = Config(
            dict(
                name=osp.basename(config),
                train_cfg=dict(max_iters=4),
                content=edits.get(config, 'as shipped')))
        cfg.merge_from_dict(options or {})
        return cfg

    return load_config


@pytest.fixture
def fake_training(monkeypatch, tmp_path):
    """``compare.train`` replaced by :func:`seed_fakes.train` (it runs in
    the jobs: its calls, failures and barrier go through a control folder);
    the configs (``load_config``) by :func:`fake_configs` whose content
    (``edits``) the test changes."""
    control = seed_fakes.Control(str(tmp_path / 'control'))
    edits = {}
    monkeypatch.setattr(compare, 'train',
                        functools.partial(seed_fakes.train, control.folder))
    monkeypatch.setattr(compare, 'load_config', fake_configs(edits))
    # a local job's interpreter imports seed_fakes
    monkeypatch.setenv(
        'PYTHONPATH',
        os.pathsep.join([TESTS, os.environ.get('PYTHONPATH', '')]))
    return control, edits


def _calls(control):
    return [(c['name'], c['seed']) for c in control.calls()]


@pytest.mark.parametrize(
    'executor',
    ['debug', pytest.param('local', marks=pytest.mark.slow)])
def test_runs_are_trained_once(tmp_path, fake_training, executor):
    control, fingerprints = fake_training
    work = str(tmp_path / 'cmp')
    args = (['a.py', 'b.py'], ['x', 'y'], [0, 1], work, {'k': 1})
    options = dict(log=lambda s: None, executor=executor)
    first = compare.run_all(*args, **options)
    assert _calls(control) == [('a.py', 0), ('a.py', 1), ('b.py', 0),
                               ('b.py', 1)]
    # Each run trains the config dumped in its folder, options merged.
    trained = [Config.fromfile(c['config']) for c in control.calls()]
    assert all(cfg.k == 1 for cfg in trained)
    assert trained[0].filename == osp.join(work, 'x', 'seed0', 'config.py')
    assert [r['history']['4']['mIoU'] for r in first] == [1.5, 2.5] * 2
    # Each result names its job and the job's log.
    for result in first:
        job = result['job']
        assert job['executor'] == executor and job['id']
        assert job['log'].startswith(
            osp.join(work, result['name'], f'seed{result["seed"]}',
                     'submitit'))
    if executor == 'local':  # a process of its own, its log written
        assert len({c['pid'] for c in control.calls()} | {os.getpid()}) == 5
        assert all(osp.isfile(r['job']['log']) for r in first)
    control.clear()
    assert compare.run_all(*args, **options) == first
    assert _calls(control) == []
    # a run without its result (interrupted) is trained again, alone
    os.remove(osp.join(work, 'y', 'seed0', layout.RESULT))
    compare.run_all(*args, **options)
    assert _calls(control) == [('b.py', 0)]
    # a failed run leaves no result; the next command retries it
    control.clear()
    os.remove(osp.join(work, 'x', 'seed1', layout.RESULT))
    control.set(fail=[('a.py', 1)])
    with pytest.raises(RuntimeError, match='training failed') as failed:
        compare.run_all(*args, **options)
    assert 'x seed 1: job ' in str(failed.value)
    assert not osp.exists(osp.join(work, 'x', 'seed1', layout.RESULT))
    # other settings in the same folder are refused: options, config content
    with pytest.raises(ValueError, match='another --work-dir'):
        compare.run_all(*args[:4], {'k': 2}, **options)
    fingerprints['a.py'] = 'edited'
    with pytest.raises(ValueError, match='another --work-dir'):
        compare.run_all(*args, **options)


@pytest.mark.slow  # local jobs: processes
def test_jobs_train_runs_at_once_and_keep_their_order(tmp_path, fake_training):
    control = fake_training[0]
    # Both runs of a pair must be in their jobs at once: the fake fails
    # after 60 s unless 2 runs have arrived.
    control.set(barrier=2)
    results = compare.run_all(['a.py', 'b.py'], ['x', 'y'], [0, 1],
                              str(tmp_path / 'two'),
                              log=lambda s: None,
                              jobs=2,
                              threads=3)
    assert control.most_at_once() == 2
    assert {c['threads'] for c in control.calls()} == {3}
    assert [(r['name'], r['seed']) for r in results] == [('x', 0), ('x', 1),
                                                         ('y', 0), ('y', 1)]
    assert sorted(_calls(control)) == [('a.py', 0), ('a.py', 1), ('b.py', 0),
                                       ('b.py', 1)]
    control.set()
    control.clear()
    compare.run_all(['a.py'], ['x'], [0, 1, 2],
                    str(tmp_path / 'one'),
                    log=lambda s: None,
                    jobs=1)
    assert len(control.calls()) == 3 and control.most_at_once() == 1


@pytest.mark.slow  # local jobs: processes
def test_a_failed_run_stops_the_runs_not_started(tmp_path, fake_training):
    control = fake_training[0]
    control.set(fail=[('a.py', 0)])
    with pytest.raises(RuntimeError, match='training failed'):
        compare.run_all(['a.py', 'b.py'], ['x', 'y'], [0, 1],
                        str(tmp_path / 'work'),
                        log=lambda s: None,
                        jobs=1)
    assert _calls(control) == [('a.py', 0)]


def test_train_passes_the_thread_count(tmp_path, monkeypatch):
    seen = {}

    class Popen(subprocess.Popen):

        def __init__(self, command, env=None, **kwargs):
            seen.update(command=command, env=env)
            super().__init__(['true'], **kwargs)

    monkeypatch.setattr(training.subprocess, 'Popen', Popen)
    monkeypatch.setenv('OMP_NUM_THREADS', '7')
    monkeypatch.delenv('MKL_CBWR', raising=False)
    training.train('c.py', 4, str(tmp_path), threads=3)
    assert seen['env']['OMP_NUM_THREADS'] == '3'
    # the CPU kernels pinned as make demo pins them (one number per host)
    assert {
        k: seen['env'][k]
        for k in ('MKL_NUM_THREADS', 'MKL_CBWR', 'ATEN_CPU_CAPABILITY',
                  'ONEDNN_MAX_CPU_ISA')
    } == dict(
        MKL_NUM_THREADS='3',
        MKL_CBWR='COMPATIBLE',
        ATEN_CPU_CAPABILITY='avx2',
        ONEDNN_MAX_CPU_ISA='AVX2')
    assert seen['command'][-1] == 'randomness.seed=4'
    assert seen['command'][-4:-2] == ['--launcher', 'none']
    training.train('c.py', 4, str(tmp_path), launcher='slurm')
    assert seen['env']['OMP_NUM_THREADS'] == '7'
    assert 'MKL_CBWR' not in seen['env']  # the environment as it is
    assert seen['command'][-4:-2] == ['--launcher', 'slurm']


@pytest.mark.slow  # local jobs: processes
def test_data_is_generated_before_any_run(tmp_path, monkeypatch,
                                          fake_training):
    control = fake_training[0]
    control.set(history=[2])
    root = str(tmp_path / 'fresh' / 'demo_shapes')
    seen = []

    def prepare(config, cfg):
        seen.append(osp.isfile(osp.join(root, 'meta.json')))
        inner(config, cfg)
        seen.append(osp.isfile(osp.join(root, 'meta.json')))

    inner = compare.prepare_data
    monkeypatch.setattr(compare, 'prepare_data', prepare)
    monkeypatch.setattr(compare, 'load_config', load_config)
    loaders = ('train_dataloader', 'val_dataloader', 'test_dataloader')
    options = {'train_cfg.max_iters': 2, 'name': 'dot'}
    for loader in loaders:
        options[f'{loader}.dataset.data_root'] = root
        options[f'{loader}.dataset.generate'] = TINY_GENERATE
    compare.run_all([DEMO_DOT], ['dot'], [0, 1],
                    str(tmp_path / 'work'),
                    options,
                    log=lambda s: None,
                    jobs=2)
    # generated once, here, before the two jobs (which found it there)
    assert seen == [False, True]
    first = min(c['start'] for c in control.calls())
    assert os.stat(osp.join(root, 'meta.json')).st_mtime <= first
    assert len(control.calls()) == 2
    missing = {'name': 'dot'}
    for loader in loaders:
        missing[f'{loader}.dataset.generate'] = None
        missing[f'{loader}.dataset.data_root'] = str(tmp_path / 'none')
    with pytest.raises(training.DataError, match='train_dataloader dataset'):
        compare.run_all([DEMO_DOT], ['dot'], [0],
                        str(tmp_path / 'work2'),
                        missing,
                        log=lambda s: None)
    assert len(control.calls()) == 2


def test_a_run_must_validate_at_its_last_iteration(tmp_path, fake_training):
    with pytest.raises(RuntimeError, match='last iteration'):
        compare.run_all(['a.py'], ['x'], [0],
                        str(tmp_path / 'work'), {'train_cfg.max_iters': 6},
                        log=lambda s: None,
                        executor='debug')
    assert not osp.exists(
        osp.join(str(tmp_path / 'work'), 'x', 'seed0', layout.RESULT))


def test_the_runs_folder_names_its_seed_for_the_arms(tmp_path, fake_training):
    """The folder run_all writes a run in is the one the arms read a
    checkpoint's training seed from."""
    compare.run_all(['a.py'], ['ell'], [3, 12],
                    str(tmp_path / 'w'),
                    log=lambda s: None,
                    executor='debug')
    for seed in (3, 12):
        folder = layout.run_dir(str(tmp_path / 'w'), 'ell', seed)
        assert folder == str(tmp_path / 'w' / 'ell' / f'seed{seed}')
        assert osp.isfile(osp.join(folder, layout.RESULT))
        assert layout.seed_in_path(osp.join(folder, 'iter_4.pth')) == seed
    assert layout.seed_in_path(str(tmp_path / 'w' / 'ell' / 'x.pth')) is None


def pickled_globals(path):
    """The ``(module, name)`` of every global that a pickle refers to."""
    with open(path, 'rb') as f:
        data = f.read()
    strings, found = [], []
    for op, arg, _ in pickletools.genops(data):
        if 'UNICODE' in op.name:
            strings.append(arg)
        elif op.name == 'STACK_GLOBAL':
            found.append(tuple(strings[-2:]))
        elif op.name == 'GLOBAL':
            found.append(tuple(arg.split(' ', 1)))
    return found


#: What a run's job pickle refers to: nothing travels by value.
JOB_GLOBALS = [('submitit.core.utils', 'DelayedSubmission'),
               ('mmseg_elliptical.utils.cluster', 'Resumable'),
               ('mmseg_elliptical.robustness.seeds.training', 'train')]


def test_the_jobs_function_travels_by_reference(tmp_path, monkeypatch):
    """run_all submits :func:`training.train`, pickled as submitit pickles
    a job: by its module and name, which a job's interpreter imports."""

    class Submitted(Exception):
        pass

    class Executor:

        def submit(self, fn, *args):  # as submitit's executors write it
            delayed = submitit.core.utils.DelayedSubmission(fn, *args)
            delayed.dump(tmp_path / 'job.pkl')
            raise Submitted

    monkeypatch.setattr(compare, 'load_config', fake_configs({}))
    monkeypatch.setattr(cluster, 'executor', lambda *a, **k: Executor())
    with pytest.raises(Submitted):
        compare.run_all(['a.py'], ['x'], [0],
                        str(tmp_path / 'w'),
                        log=lambda s: None)
    assert pickled_globals(tmp_path / 'job.pkl') == JOB_GLOBALS


@pytest.fixture
def two_configs(tmp_path):
    """Two config files for the tool's argument check (the fake training
    reads neither)."""
    paths = [str(tmp_path / name) for name in ('a.py', 'b.py')]
    for path in paths:
        open(path, 'w').close()
    return paths


def test_the_tool_writes_its_outputs(tool, tmp_path, fake_training,
                                     two_configs, capsys):
    control = fake_training[0]
    work = str(tmp_path / 'cmp')
    argv = [
        *two_configs, '--names', 'x', 'y', '--seeds', '0', '1', '--work-dir',
        work, '--executor', 'debug', '--jobs', '2', '--threads', '1'
    ]
    summary = tool.main(argv)
    out = capsys.readouterr().out
    assert 'trainings: 4 steps, about ' in out  # the plan, then each run
    assert out.count(' left (') == 3 and '; all done' in out
    with open(osp.join(work, 'compare.json')) as f:
        report = json.load(f)
    assert report['summary'] == summary
    assert summary['x']['mIoU']['mean'] == pytest.approx(2.0)  # 1.5, 2.5
    runs = [(r['name'], r['seed']) for r in report['runs']]
    assert runs == [('x', 0), ('x', 1), ('y', 0), ('y', 1)]
    assert report['command'] == dict(
        report['command'], jobs=2, threads=1, executor='debug')
    with open(osp.join(work, 'compare.md')) as f:
        rows = [[c.strip() for c in line.strip('|').split('|')]
                for line in f.read().splitlines()]
    assert rows[0] == ['model', 'seeds', 'mIoU', 'min/run']
    assert rows[2][:3] == ['x', '2', '2.00 ± 0.71']
    assert osp.isfile(osp.join(work, 'compare.png'))
    assert 'Final validation metrics' in out and 'compare.md' in out
    control.clear()
    assert tool.main(argv) == summary
    assert 'done before, kept' in capsys.readouterr().out
    assert _calls(control) == []


def test_the_tools_exit_status_of_a_failed_or_stale_run(
        tool, tmp_path, fake_training, two_configs, capsys):
    control, edits = fake_training
    argv = [
        two_configs[0], '--seeds', '0', '--work-dir',
        str(tmp_path / 'cmp'), '--executor', 'debug'
    ]
    control.set(fail=[('a.py', 0)])
    with pytest.raises(SystemExit) as failed:  # the run's error, status 1
        tool.main(argv)
    assert isinstance(failed.value.code, str), failed.value.code
    assert 'a seed 0: job ' in failed.value.code
    assert failed.value.code.endswith('training failed')
    control.set()
    tool.main(argv)
    edits[two_configs[0]] = 'edited'
    capsys.readouterr()
    with pytest.raises(SystemExit) as stale:  # refused as an input error
        tool.main(argv)
    assert stale.value.code == 2
    assert 'another --work-dir' in capsys.readouterr().err


def test_fingerprint_of_the_config_and_options():
    cfg = load_config(DEMO_DOT)
    digest = training.fingerprint(cfg)
    assert cfg.train_cfg.max_iters == 3000
    seven = load_config(DEMO_DOT, {'train_cfg.max_iters': 7})
    assert seven.train_cfg.max_iters == 7
    assert training.fingerprint(seven) != digest
    # the twins differ in the backbone type only: other content
    assert training.fingerprint(load_config(DEMO_ELLIPTICAL)) != digest
    assert training.fingerprint(load_config(DEMO_DOT)) == digest


def test_arguments_are_checked(tool, monkeypatch, capsys, srun_on_path,
                               tmp_path):
    monkeypatch.setattr(compare, 'run_all', None)  # nothing may start
    monkeypatch.setattr(tool, 'cores', lambda: 4)
    args = tool.parse_args([DEMO_DOT])
    assert (args.jobs, args.threads) == (4, 1)
    args = tool.parse_args([DEMO_DOT, '--jobs', '2'])
    assert (args.jobs, args.threads) == (2, 2)
    args = tool.parse_args([DEMO_DOT, '--jobs', '8', '--threads', '3'])
    assert (args.jobs, args.threads) == (8, 3)
    # On Slurm (srun found): every run at once, each on its task's CPUs.
    slurm = [
        DEMO_DOT, DEMO_DOT, '--names', 'a', 'b', '--executor', 'slurm',
        '--partition', 'p', '--cpus-per-task', '5', '--tasks-per-run', '2'
    ]
    args = tool.parse_args(slurm)
    assert (args.jobs, args.threads) == (6, 5)
    assert tool.main(slurm, check_only=True) is None  # nothing started
    seen = {}  # main hands the runs their jobs' resources
    monkeypatch.setattr(compare, 'run_all', lambda *a, **k: seen.update(k))
    assert tool.main([*slurm, '--no-wait', '--work-dir', str(tmp_path)]) == {}
    assert (seen['slurm'].tasks, seen['slurm'].partition,
            seen['slurm'].gpus_per_run, seen['jobs']) == (2, 'p', 0, 6)
    monkeypatch.setattr(compare, 'run_all', None)
    monkeypatch.setattr(tool.shutil, 'which', lambda name: None)
    with pytest.raises(SystemExit) as exc:  # no Slurm here
        tool.parse_args([DEMO_DOT, '--executor', 'slurm', '--partition', 'p'])
    assert exc.value.code == 2
    assert 'srun is not on the PATH' in capsys.readouterr().err
    for argv in ([DEMO_DOT, '--names', 'a', 'b'], [DEMO_DOT, 'missing.py'],
                 [DEMO_DOT, DEMO_DOT, '--names', 'a',
                  'a'], [DEMO_DOT, '--seeds', '1',
                         '1'], [DEMO_DOT, '--jobs',
                                '0'], [DEMO_DOT, '--threads',
                                       '0'], [DEMO_DOT, '--executor', 'slurm'],
                 [DEMO_DOT, '--executor', 'cloud'], [DEMO_DOT, '--no-wait']):
        with pytest.raises(SystemExit) as exc:
            tool.main(argv)
        assert exc.value.code == 2


def _tiny_options(demo_root):
    opts = [
        'model.backbone.num_layers=2', 'model.backbone.embed_dims=48',
        'model.decode_head.in_channels=48', 'model.decode_head.channels=48',
        'model.decode_head.embed_dims=48', 'train_dataloader.batch_size=2',
        'train_cfg.max_iters=2', 'train_cfg.val_interval=1',
        'default_hooks.checkpoint.interval=2'
    ]
    return opts + demo_data_options(demo_root)


@pytest.mark.slow  # trains end to end, in subprocesses
def test_end_to_end_on_tiny_runs(tool, demo_root, tmp_path, monkeypatch,
                                 capsys):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    work = str(tmp_path / 'cmp')
    argv = [
        DEMO_ELLIPTICAL, '--names', 'ell', '--seeds', '0', '3', '--work-dir',
        work, '--cfg-options', *_tiny_options(demo_root)
    ]
    summary = tool.main(argv)
    for seed in (0, 3):
        run = osp.join(work, 'ell', f'seed{seed}')
        with open(osp.join(run, layout.RESULT)) as f:
            result = json.load(f)
        assert sorted(result['history'], key=int) == ['1', '2']
        dumped = [p for p in os.listdir(run) if p.endswith('.py')]
        with open(osp.join(run, dumped[0])) as f:
            assert f'randomness = dict(seed={seed})' in f.read()
    with open(osp.join(work, 'compare.json')) as f:
        runs = json.load(f)['runs']
    finals = [r['history']['2']['mIoU'] for r in runs]
    for run in runs:  # each run's job: its id, its log, its pickle
        assert run['job']['executor'] == 'local', run['job']
        assert osp.isfile(run['job']['log']), run['job']
        folder = osp.join(work, 'ell', f'seed{run["seed"]}', 'submitit')
        pickles = glob(osp.join(folder, '*_submitted.pkl'))
        assert [pickled_globals(p) for p in pickles] == [JOB_GLOBALS]
    assert summary['ell']['mIoU']['mean'] == pytest.approx(np.mean(finals))
    with open(osp.join(work, 'compare.md')) as f:
        row = f.read().splitlines()[2]
    assert [c.strip() for c in row.strip('|').split('|')][:2] == ['ell', '2']
    with open(osp.join(work, 'compare.png'), 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    assert 'compare.md' in capsys.readouterr().out

    def no_training(*args, **kwargs):
        raise AssertionError('a finished run was trained again')

    monkeypatch.setattr(subprocess, 'run', no_training)
    again = tool.main(argv)
    assert again['ell']['mIoU'] == summary['ell']['mIoU']
