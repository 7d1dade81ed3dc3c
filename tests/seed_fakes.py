"""A stand-in for ``robustness/seeds/training.train`` that runs in the runs'
jobs (submitit's processes, or this process with the debug executor): it
records each call in a control folder, fails the runs named there, can wait
at a barrier of files, and writes a validation history instead of training.

Light imports only: a local job's interpreter imports this module.
"""
import json
import os
import os.path as osp
import re
import time
from typing import Dict, List, Optional


def _scalars(run_dir: str, stamp: str, records: List[Dict]) -> None:
    """mmengine's ``vis_data/scalars.json`` of one (re)start of a run."""
    folder = osp.join(run_dir, stamp, 'vis_data')
    os.makedirs(folder)
    with open(osp.join(folder, 'scalars.json'), 'w') as f:
        f.write(''.join(json.dumps(r) + '\n' for r in records))


class Control:
    """The control folder of the fake: what it does, what it saw."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(osp.join(folder, 'arrived'), exist_ok=True)

    def set(self,
            fail: Optional[List] = None,
            barrier: int = 0,
            history: Optional[List[int]] = None) -> None:
        """Fail the ``(name, seed)`` runs in ``fail``; wait until
        ``barrier`` runs have arrived (0: no barrier); validate at the
        iterations in ``history`` (default 2 and 4)."""
        with open(osp.join(self.folder, 'settings.json'), 'w') as f:
            json.dump(
                dict(
                    fail=[list(x) for x in fail or ()],
                    barrier=barrier,
                    history=history or [2, 4]), f)
        for name in os.listdir(osp.join(self.folder, 'arrived')):
            os.remove(osp.join(self.folder, 'arrived', name))

    def settings(self) -> Dict:
        path = osp.join(self.folder, 'settings.json')
        if not osp.isfile(path):
            return dict(fail=[], barrier=0, history=[2, 4])
        with open(path) as f:
            return json.load(f)

    def calls(self) -> List[Dict]:
        """Every call so far, in the order they started."""
        path = osp.join(self.folder, 'calls.jsonl')
        if not osp.isfile(path):
            return []
        with open(path) as f:
            return sorted((json.loads(line) for line in f),
                          key=lambda c: c['start'])

    def clear(self) -> None:
        path = osp.join(self.folder, 'calls.jsonl')
        if osp.isfile(path):
            os.remove(path)

    def most_at_once(self) -> int:
        """The most calls that ran at the same time."""
        calls = self.calls()
        starts = [(c['start'], 1) for c in calls]
        events = sorted(starts + [(c['end'], -1) for c in calls])
        now = most = 0
        for _, step in events:
            now += step
            most = max(most, now)
        return most


def config_name(config: str) -> str:
    """The ``name`` a test's config holds (read as text: no mmengine)."""
    with open(config) as f:
        return re.search(r"^name = '([^']*)'", f.read(), re.M).group(1)


def train(folder: str,
          config: str,
          seed: int,
          work_dir: str,
          threads: Optional[int] = None,
          launcher: str = 'none') -> float:
    """``training.train``'s stand-in (bound to a control ``folder``
    with ``functools.partial``)."""
    control = Control(folder)
    settings = control.settings()
    name = config_name(config)
    start = time.time()
    if settings['barrier']:
        open(osp.join(folder, 'arrived', f'{name}-{seed}'), 'w').close()
        deadline = time.monotonic() + 60
        while len(os.listdir(osp.join(folder,
                                      'arrived'))) < settings['barrier']:
            if time.monotonic() > deadline:
                raise RuntimeError('barrier: the other runs never came')
            time.sleep(0.05)
    time.sleep(0.05)
    call = dict(
        name=name,
        seed=seed,
        config=config,
        threads=threads,
        launcher=launcher,
        pid=os.getpid(),
        start=start,
        end=time.time())
    with open(osp.join(folder, 'calls.jsonl'), 'a') as f:
        f.write(json.dumps(call) + '\n')
    if [name, seed] in settings['fail']:
        raise RuntimeError('training failed')
    steps = settings['history']
    _scalars(work_dir, f'2024_{len(control.calls())}',
             [dict(mIoU=seed + 0.5 + k, step=s) for k, s in enumerate(steps)])
    return 1.0
