"""Where compare_seeds.py keeps its runs: ``WORK_DIR/NAME/seedS/`` (written
by :mod:`.compare`, read back by :func:`seed_in_path` for the arms)."""
import os.path as osp
import re
from typing import Optional

#: A run's folder under its name's: this, then the seed.
SEED_FOLDER = 'seed'
#: In a run's folder: its result, its resolved config, its training's log.
RESULT, CONFIG, TRAIN_LOG = 'result.json', 'config.py', 'train.log'
#: In a run's folder: its submitit files, and there its last job's record.
JOB_FOLDER, JOB = 'submitit', 'job.json'
#: In the work dir: ``--no-wait``'s dependency flag.
DEPENDENCY = 'dependency'
#: A folder or name part ``seed3`` (:func:`run_dir`'s), ``seed_3``, ``seed-3``.
SEED_IN_PATH = re.compile(
    rf'(?:^|[/_.-]){re.escape(SEED_FOLDER)}[_-]?(\d+)(?=$|[/_.-])')


def run_dir(work_dir: str, name: str, seed: int) -> str:
    """The folder of the run of ``name`` on ``seed``."""
    return osp.join(work_dir, name, f'{SEED_FOLDER}{seed}')


def seed_in_path(path: str) -> Optional[int]:
    """The training seed that a path names (its last seed part), if any."""
    found = SEED_IN_PATH.findall(path)
    return int(found[-1]) if found else None
