"""One run of compare_seeds.py: its job's function (:func:`train`), its
datasets built before any run, and its ``result.json`` (:mod:`.layout`)."""
import copy
import hashlib
import json
import os
import os.path as osp
import subprocess
import sys
import time
from typing import Dict, Optional

from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.registry import DATASETS

from ...utils import cluster
from ...utils.pinned_env import pinned_env
from .layout import JOB, JOB_FOLDER, RESULT, TRAIN_LOG
from .runs import read_history

TRAIN = ('from mmseg_elliptical.engine import run_mmseg_tool; '
         'run_mmseg_tool("train.py")')


class RunError(RuntimeError):
    """A training run that failed, or left no final validation."""


class StaleRunError(ValueError):
    """A run folder that holds another run (config, seed, options)."""


class DataError(ValueError):
    """A config whose datasets cannot be built."""


def fingerprint(cfg: Config) -> str:
    """The start of the SHA-256 of a resolved config's text (its bases and
    options merged)."""
    return hashlib.sha256(cfg.pretty_text.encode()).hexdigest()[:16]


def train(config: str,
          seed: int,
          work_dir: str,
          threads: Optional[int] = None,
          launcher: str = 'none') -> float:
    """Run mmseg's ``tools/train.py`` on one seed (resuming if it can); the
    function of a run's job.

    Args:
        config (str): Config file.
        seed (int): ``randomness.seed``.
        work_dir (str): The run's work dir; its ``train.log`` gets the
            output.
        threads (int, optional): torch's threads of the run, with the CPU
            kernels pinned as ``make demo`` pins them
            (:func:`~mmseg_elliptical.utils.pinned_env.pinned_env`; default:
            this process's environment as it is).
        launcher (str): ``--launcher`` (``slurm`` in every task of a Slurm
            job).

    Returns:
        float: Wall-clock seconds.
    """
    os.makedirs(work_dir, exist_ok=True)
    command = [
        sys.executable, '-c', TRAIN, config, '--work-dir', work_dir,
        '--resume', '--launcher', launcher, '--cfg-options',
        f'randomness.seed={seed}'
    ]
    env = pinned_env(threads=threads) if threads else dict(os.environ)
    out = osp.join(work_dir, TRAIN_LOG)
    start = time.perf_counter()
    with open(out, 'a') as f, cluster.warning_signal_blocked():
        proc = subprocess.Popen(
            command, stdout=f, stderr=subprocess.STDOUT, env=env)
    with proc:
        try:
            proc.wait()
        except BaseException:  # submitit ends the task: the run ends too
            proc.kill()
            raise
    if proc.returncode:
        with open(out) as f:
            tail = ''.join(f.readlines()[-20:])
        raise RunError(f'Training {config} with seed {seed} failed '
                       f'(exit status {proc.returncode}); the end of '
                       f'{out}:\n{tail}')
    return time.perf_counter() - start


def prepare_data(config: str, cfg: Config) -> None:
    """Build a config's train and validation datasets once, before any run:
    a dataset that generates its files (the demo's) writes them now, and a
    missing data folder is one error here, not one per run.

    Raises:
        DataError: A dataset cannot be built; the message names it.
    """
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    for key in ('train_dataloader', 'val_dataloader'):
        dataset = (cfg.get(key) or {}).get('dataset')
        if dataset is None:
            continue
        try:
            DATASETS.build(copy.deepcopy(dataset))
        except (OSError, ValueError) as e:
            raise DataError(f'{config}: the {key} dataset cannot be built '
                            f'({type(e).__name__}: {e}); no run started.')


def finished(run_dir: str, settings: Dict) -> Optional[Dict]:
    """The run's result if it is done.

    Raises:
        StaleRunError: The folder holds another run.
    """
    path = osp.join(run_dir, RESULT)
    if not osp.isfile(path):
        return None
    with open(path) as f:
        result = json.load(f)
    found = {k: result.get(k) for k in settings}
    if found != settings:
        raise StaleRunError(
            f'{path} holds a run with {found}, not {settings}: use '
            'another --work-dir, or delete that folder to rerun it.')
    return result


def finish(cfg: Config, settings: Dict, run_dir: str, seconds: float,
           cfg_options: Optional[dict], job: Dict) -> Dict:
    """Check a trained run's history and write its ``result.json``; return
    the result."""
    history = read_history(run_dir)
    last_iter = int(cfg.train_cfg.max_iters)
    if max(history, default=None) != last_iter:
        raise RunError(
            f'{run_dir} holds no validation at the last iteration '
            f'({last_iter}; validated: {sorted(history)}): does the '
            'config validate (val_cfg, val_evaluator) and log with '
            "mmengine's LocalVisBackend? If the run was stopped "
            'during its last validation, delete the folder.')
    result = dict(
        settings,
        cfg_options=dict(cfg_options or {}),
        seconds=round(seconds, 1),
        job=job,
        history={
            str(k): v
            for k, v in sorted(history.items())
        })
    with open(osp.join(run_dir, RESULT), 'w') as f:
        json.dump(result, f, indent=1)
    return result


def saved_job(run_dir: str) -> Optional[Dict]:
    """The record of the run's last job (``job.json``), if any."""
    path = osp.join(run_dir, JOB_FOLDER, JOB)
    if not osp.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def save_job(run_dir: str, record: Dict) -> None:
    """Write the record of the run's job (:func:`saved_job` reads it)."""
    folder = osp.join(run_dir, JOB_FOLDER)
    os.makedirs(folder, exist_ok=True)
    with open(osp.join(folder, JOB), 'w') as f:
        json.dump(record, f, indent=1)
