"""The paper's protocol (docs/evidence.md, "The paper's protocol on a Slurm
cluster") on a real single-node Slurm (``tests/slurm_cluster.py``), from
training to the report, on the demo twins at tiny budgets: the training
jobs submitted by ``compare_seeds.py --no-wait``, the grids and the report
queued at once behind them through its dependency flag, nothing typed in
between. And a grid job killed by Slurm in the middle of a cell, run again,
ends with the cells of an uninterrupted run."""
import json
import os
import os.path as osp
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from builders import DEMO_DOT, DEMO_ELLIPTICAL, ROOT, demo_data_options
from processes import run_command

from mmseg_elliptical.robustness.audit.cells import SWEEP

pytestmark = [pytest.mark.usefixtures('single_thread'), pytest.mark.slow]

TASKS = 2
#: The arms and their configs, in the docs' order: the elliptical one,
#: then its dot-product twin (the baseline).
ARMS = {'elliptical': DEMO_ELLIPTICAL, 'dot-product': DEMO_DOT}
SEEDS = (0, 1)
ITERS = 2


def options(demo_root: str) -> list:
    """``--cfg-options`` of every step: the demo twins shrunk to 2 layers
    of 48 dims on the tiny demo data, trained for :data:`ITERS` iterations
    (validated and saved at the last); the test set not serialized (its
    ``gc.collect`` per cell is most of a tiny cell's time)."""
    opts = [
        'model.backbone.num_layers=2', 'model.backbone.embed_dims=48',
        'model.decode_head.in_channels=48', 'model.decode_head.channels=48',
        'model.decode_head.embed_dims=48', 'train_dataloader.batch_size=2',
        f'train_cfg.max_iters={ITERS}', f'train_cfg.val_interval={ITERS}',
        f'default_hooks.checkpoint.interval={ITERS}',
        'test_dataloader.dataset.serialize_data=False'
    ]
    return opts + demo_data_options(demo_root)


def runs(work: str) -> list:
    """``$RUNS``: every run's config and final checkpoint, arm by arm."""
    return [
        x for name, config in ARMS.items() for seed in SEEDS for x in (
            config,
            osp.join(work, 'train', name, f'seed{seed}', f'iter_{ITERS}.pth'))
    ]


#: ``$ARMS``: one name per run, the dot-product arm the baseline.
ARM_ARGS = [
    '--names', *[name for name in ARMS for _ in SEEDS], '--baseline',
    'dot-product'
]
#: Steps 2 to 4 as the docs write them (job name, script, the tool's
#: arguments after ``$RUNS $ARMS``), at tiny budgets on 2 test images: one
#: corruption cell; one eps of APGD-MCE, adaptive too, with the audit at 4
#: sweep iterations and 2 square queries (eps 32: few sweep cells above
#: it); the report's own grids with its attack section plain (step 3
#: has the adaptive attack and the audit).
STEPS = {
    'ade20k-c': ('tools/slurm_robustness.sh', [
        '--corruptions', 'gaussian_noise', '--severities', '1', '--max-images',
        '2', '--resamples', '100'
    ]),
    'attacks': ('tools/slurm_adversarial.sh', [
        '--protocol', 'sea', '--attacks', 'apgd-mce', '--epsilons', '32',
        '--steps', '4', '--adaptive', '--audit', '--audit-sweep-steps', '4',
        '--queries', '2', '--max-images', '2', '--resamples', '100'
    ]),
    'report': ('tools/slurm_launch.sh', [
        '--corruptions', 'gaussian_noise', '--severities', '1', '--max-images',
        '2', '--attack-max-images', '2', '--no-audit', '--no-adaptive',
        '--speed-size', '32', '--speed-rounds', '1', '--resamples', '100'
    ]),
}


def step_command(slurm, step: str, work: str, demo_root: str) -> list:
    """The command line of step ``step``, its work dir ``work/step``."""
    script, budget = STEPS[step]
    tool = ['analysis_tools/compare_models.py'] if step == 'report' else []
    return [
        'bash', script, *tool, slurm.partition, step, *runs(work), *ARM_ARGS,
        *budget, '--work-dir',
        osp.join(work, step), '--cfg-options', *options(demo_root)
    ]


def jobs(slurm) -> dict:
    """The last job of each name that Slurm still knows: ``{name: {field:
    value}}`` of ``scontrol show job``."""
    found = {}
    for line in slurm.command('scontrol', 'show', 'job', '-o').splitlines():
        fields = dict(re.findall(r'(\w+)=(\S*)', line))
        name = fields.get('JobName')
        if name and int(fields['JobId']) > int(
                found.get(name, {}).get('JobId', -1)):
            found[name] = fields
    return found


def queued(slurm, names, timeout: float = 120) -> dict:
    """``{name: (state, reason, dependency)}`` of the jobs named ``names``
    as ``squeue`` first shows each of them."""
    seen, deadline = {}, time.monotonic() + timeout
    while set(names) - set(seen):
        assert time.monotonic() < deadline, (seen, slurm.command('squeue'))
        for line in slurm.command('squeue', '-h', '-o',
                                  '%j|%T|%r|%E').splitlines():
            name, state, reason, dependency = line.split('|')
            if name in names:
                seen.setdefault(name, (state, reason, dependency))
        time.sleep(0.2)
    return seen


def cells(path: str) -> dict:
    """Every model's cell keys in a grid's JSON."""
    with open(path) as f:
        return {n: list(m['cells']) for n, m in json.load(f)['models'].items()}


def test_the_protocol_from_training_to_the_report(slurm, demo_root,
                                                  tmp_path) -> None:
    work = str(tmp_path / 'paper')
    train = [
        sys.executable, 'tools/analysis_tools/compare_seeds.py',
        *ARMS.values(), '--names', *ARMS, '--seeds', *map(str, SEEDS),
        '--work-dir',
        osp.join(work, 'train'), '--executor', 'slurm', '--partition',
        slurm.partition, '--cfg-options', *options(demo_root)
    ]
    # 1. The trainings, submitted; the flag that holds the later steps.
    run_command(train + ['--no-wait'], timeout=120)
    with open(osp.join(work, 'train', 'dependency')) as f:
        flag = f.read().strip()
    ids = flag.split('afterok:', 1)[-1].split(':')
    assert flag.startswith('--dependency=afterok:') and len(ids) == 4, flag
    # 2-4, queued at once behind them (SRUN_ARGS), nothing typed between.
    env = slurm.cpu_job_env(TASKS, SRUN_ARGS=flag)
    with ThreadPoolExecutor(len(STEPS)) as pool:
        steps = {
            step:
            pool.submit(
                run_command,
                step_command(slurm, step, work, demo_root),
                timeout=540,
                env=env)
            for step in STEPS
        }
        for step, (state, reason, dependency) in queued(slurm, STEPS).items():
            assert (state, reason) == ('PENDING', 'Dependency'), step
            held = re.findall(r'afterok:(\d+)', dependency)
            assert held and set(held) <= set(ids), (step, dependency)
        logs = {step: done.result() for step, done in steps.items()}
    known = jobs(slurm)
    trained = [known[f'{n}-seed{s}'] for n in ARMS for s in SEEDS]
    assert sorted(j['JobId'] for j in trained) == sorted(ids)
    assert {j['JobState'] for j in trained} == {'COMPLETED'}
    last_end = max(j['EndTime'] for j in trained)  # ISO times sort as text
    for step in STEPS:
        assert known[step]['JobState'] == 'COMPLETED', known[step]
        assert known[step]['StartTime'] >= last_end, (step, known[step])
        assert f'--ntasks={TASKS}' in logs[step].stderr
    # The runs' outputs, from jobs that ended while nobody waited.
    log = run_command(train, timeout=120).stdout
    assert log.count('ended with its result while nobody waited') == 4, log
    with open(osp.join(work, 'train', 'compare.json')) as f:
        compared = json.load(f)
    assert [
        (r['name'], r['seed'], r['job']['executor'], r['job']['id'])
        for r in compared['runs']
    ] == [(n, s, 'slurm', j['JobId'])
          for (n, s), j in zip([(n, s) for n in ARMS for s in SEEDS], trained)]
    assert all(str(ITERS) in r['history'] for r in compared['runs'])
    assert set(compared['summary']) == set(ARMS)
    # The grids: every run's cells, and the arms' summaries.
    names = [f'{n}#{s}' for n in ARMS for s in SEEDS]
    grid = cells(osp.join(work, 'ade20k-c', 'robustness.json'))
    assert grid == {n: ['clean', 'gaussian_noise/1'] for n in names}
    attacked = cells(osp.join(work, 'attacks', 'adversarial.json'))
    assert list(attacked) == names
    with open(osp.join(work, 'attacks', 'adversarial.json')) as f:
        audits = {n: s['audit'] for n, s in json.load(f)['summary'].items()}
    for name, keys in attacked.items():
        # Through m too where there is one; the audit: the sweep of the
        # balanced loss from eps 32 up (SWEEP), doubled iterations, FGSM, the
        # square attack and transfer from the other arm's run of its seed.
        other = names[(names.index(name) + len(SEEDS)) % len(names)]
        ways, theirs = (['', '-adaptive']
                        if n.startswith('elliptical') else ['']
                        for n in (name, other))
        expected = {'clean', 'fgsm/linf/32/1', 'square/linf/32/2'}
        expected |= {f'apgd-mce{w}/linf/32/{k}' for w in ways for k in (4, 8)}
        expected |= {
            f'apgd-mce-bal{w}/linf/{e:g}/4'
            for w in ways
            for e in (32., *[e for e in SWEEP if e > 32])
        }
        expected |= {f'apgd-mce-bal{w}/linf/32/8' for w in ways}  # doubled
        expected |= {f'apgd-dlr{w}/linf/32/4' for w in ways}  # margin loss
        expected |= {f'apgd-mce{w}@{other}/linf/32/4' for w in theirs}
        if audits[name]['verdict'].startswith('failed: '):  # BPDA and EOT
            expected |= {
                f'apgd-mce-bal{w}-{r}/linf/32/4'
                for w in ways
                for r in ('bpda', 'eot8')
            }
        assert set(keys) == expected, (name, sorted(keys))
    for tool, step in (('robustness', 'ade20k-c'), ('adversarial', 'attacks')):
        with open(osp.join(work, step, f'{tool}.json')) as f:
            data = json.load(f)
        assert list(data['summary']) == names, tool
        for arm in ARMS:  # each arm: its runs, with their training seeds
            assert data['arms'][arm]['runs'] == [f'{arm}#{s}' for s in SEEDS]
            assert data['arms'][arm]['seeds'] == {
                f'{arm}#{s}': s
                for s in SEEDS
            }, (tool, arm)
        assert osp.isfile(osp.join(work, step, f'{tool}.md'))
    with open(osp.join(work, 'attacks', 'adversarial.md')) as f:
        verdicts = f.read()
    for name in names:  # the audit's verdict on every run
        assert re.search(
            rf'^- {re.escape(name)}: (no sign of gradient masking|failed: |'
            r'inconclusive: ).*; 2 images, fewer than 30, audit preset: ',
            verdicts, re.M), name
    # The report: its files, both arms side by side across their seeds.
    with open(osp.join(work, 'report', 'report.json')) as f:
        report = json.load(f)
    assert [m['name'] for m in report['models']] == names
    for section in ('robustness', 'adversarial'):
        assert list(report['arms'][section]) == list(ARMS), section
    for name in ('report.md', 'robustness.md', 'adversarial.md', 'collapse.md',
                 'attention.png'):
        assert osp.isfile(osp.join(work, 'report', name)), name
    with open(osp.join(work, 'report', 'report.md')) as f:
        text = f.read()
    assert '## Verdicts across seeds' in text
    assert '- elliptical - dot-product, clean mIoU: ' in text
    assert 'training seeds 0, 1 / 0, 1' in text


#: A hook that holds every task of a grid after its 3rd test batch, the
#: first of the model's second cell at 2 batches a task, while ``pause`` is
#: in ``folder`` (each task says so with ``paused.RANK`` there); imported by
#: the config of the grid's first model.
PAUSE = '''
import os, time
from mmengine.hooks import Hook
from mmseg.registry import HOOKS


@HOOKS.register_module()
class PauseInCell(Hook):
    def __init__(self, folder, batch=3):
        self.folder, self.batch, self.seen = folder, batch, 0

    def after_test_iter(self, runner, batch_idx, data_batch=None,
                        outputs=None):
        self.seen += 1
        pause = os.path.join(self.folder, 'pause')
        if self.seen == self.batch and os.path.exists(pause):
            open(os.path.join(self.folder, f'paused.{runner.rank}'),
                 'w').close()
            while os.path.exists(pause):
                time.sleep(0.2)
'''
#: Three cells a model (the clean one first) on 4 images, 2 a task.
GRIDS = {
    'robustness': [
        '--corruptions', 'gaussian_noise', '--severities', '1', '2',
        '--max-images', '4', '--resamples', '100'
    ],
    'adversarial': [
        '--attacks', 'pgd', '--epsilons', '4', '8', '--steps', '2',
        '--step-size', '2', '--max-images', '4', '--resamples', '100'
    ],
}
GRID_KEYS = {
    'robustness': ['gaussian_noise/1', 'gaussian_noise/2'],
    'adversarial': ['pgd/linf/4/2', 'pgd/linf/8/2'],
}
TIMING = ('seconds', 'finished')


def stored(work: str, tool: str) -> dict:
    """Every model's cells in ``<tool>.json`` (empty if none yet)."""
    path = osp.join(work, f'{tool}.json')
    if not osp.exists(path):
        return {}
    with open(path) as f:
        return {n: m['cells'] for n, m in json.load(f)['models'].items()}


def untimed(models: dict) -> dict:
    return {
        name: {
            key: {
                k: v
                for k, v in cell.items() if k not in TIMING
            }
            for key, cell in model.items()
        }
        for name, model in models.items()
    }


@pytest.mark.parametrize('tool', ['robustness', 'adversarial'])
def test_a_grid_job_killed_mid_cell_resumes_to_the_uninterrupted_cells(
        slurm, demo_models, tmp_path, tool) -> None:
    if tool == 'robustness':
        pytest.importorskip('imagecorruptions')
    whole, cut = str(tmp_path / 'whole'), str(tmp_path / 'cut')
    (tmp_path / 'grid_pause.py').write_text(PAUSE)
    paused = tmp_path / 'ell_paused.py'
    paused.write_text(
        f"_base_ = ['{demo_models[0]}']\n"
        "custom_imports = dict(imports=['mmseg_elliptical', 'grid_pause'], "
        'allow_failed_imports=False)\n'
        f"custom_hooks = [dict(type='PauseInCell', folder='{cut}')]\n")
    env = slurm.cpu_job_env(
        TASKS,
        PYTHONPATH=os.pathsep.join(
            [str(tmp_path), os.environ.get('PYTHONPATH', '')]))

    def command(work: str, name: str) -> list:
        return [
            'bash', f'tools/slurm_{tool}.sh', slurm.partition, name,
            str(paused), demo_models[1], *demo_models[2:], '--names', 'ell',
            'dot', *GRIDS[tool], '--work-dir', work, '--cfg-options',
            'test_dataloader.dataset.serialize_data=False'
        ]

    run_command(command(whole, f'{tool}-whole'), env=env, timeout=400)
    expected = stored(whole, tool)
    assert [list(m)
            for m in expected.values()] == [['clean', *GRID_KEYS[tool]]] * 2
    os.makedirs(cut)
    open(osp.join(cut, 'pause'), 'w').close()
    name = f'{tool}-cut'
    with open(tmp_path / 'cut.log', 'w') as log:
        proc = subprocess.Popen(
            command(cut, name),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not all(
                    osp.exists(osp.join(cut, f'paused.{rank}'))
                    for rank in range(TASKS)):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / 'cut.log').read_text()[-3000:]
                time.sleep(0.2)
            # Both tasks are in the first batches of ell's second cell.
            before = stored(cut, tool)
            assert {
                n: list(m)
                for n, m in before.items()
            } == {
                'ell': ['clean'],
                'dot': []
            }
            job = jobs(slurm)[name]
            assert job['JobState'] == 'RUNNING', job
            slurm.command('scancel', '--signal=KILL', job['JobId'])
            proc.wait(120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    out = (tmp_path / 'cut.log').read_text()
    assert proc.returncode != 0, out[-3000:]
    assert stored(cut, tool) == before, out[-3000:]
    os.remove(osp.join(cut, 'pause'))
    log = run_command(command(cut, name), env=env, timeout=400)
    assert '6 cells (2 models), 1 already done, 5 to compute.' in (log.stdout +
                                                                   log.stderr)
    got = stored(cut, tool)
    assert got['ell']['clean'] == before['ell']['clean']  # kept as it was
    assert json.dumps(untimed(got)) == json.dumps(untimed(expected))
    for model, keys in expected.items():
        for key in keys:
            with np.load(osp.join(whole, 'areas', model, f'{key}.npz')) as a, \
                    np.load(osp.join(cut, 'areas', model,
                                     f'{key}.npz')) as b:
                assert sorted(a.files) == sorted(b.files)
                for array in a.files:
                    assert np.array_equal(a[array],
                                          b[array]), (model, key, array)
