"""Evaluate one built model on any test dataloader with mmengine's loop."""
import copy
import numbers
import warnings
from typing import Dict

from mmengine.config import Config


class CellEvaluator:
    """One model, built once, evaluated on any dataloader by its test loop.

    Does what ``Runner.test()`` does, with the run-level part (``before_run``
    hooks, loading the checkpoint; ``after_run`` in :meth:`close`) done once
    and a fresh test loop of the config's type per :meth:`evaluate`, so the
    model is never rebuilt or reloaded.

    Args:
        cfg (Config): The model's config (with any ``--cfg-options`` merged).
        checkpoint (str): Checkpoint to load.
        work_dir (str): Runner work dir (logs).
        quiet (bool): Log warnings only and hide build-time warnings.
            Defaults to True.
    """

    def __init__(self,
                 cfg: Config,
                 checkpoint: str,
                 work_dir: str,
                 quiet: bool = True) -> None:
        from mmengine.runner import Runner
        for key in ('test_dataloader', 'test_cfg', 'test_evaluator'):
            if not cfg.get(key):
                raise ValueError(f'The config has no {key}: the robustness '
                                 'tool runs the test loop it defines.')
        cfg = copy.deepcopy(cfg)
        cfg.work_dir = work_dir
        cfg.load_from = checkpoint
        cfg.resume = False
        if quiet:
            cfg.log_level = 'WARNING'
        self.cfg = cfg
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter('ignore')
            self.runner = Runner.from_cfg(cfg)
            self.runner.call_hook('before_run')
            self.runner.load_or_resume()

    def evaluate(self, loader_cfg: Dict) -> Dict[str, float]:
        """Run the config's test loop on ``loader_cfg`` and return metrics.

        Args:
            loader_cfg (dict): Test dataloader config.

        Returns:
            dict[str, float]: The evaluator's scalar metrics.
        """
        from mmengine.registry import LOOPS
        loop_cfg = copy.deepcopy(dict(self.cfg.test_cfg))
        loop_cfg.setdefault('type', 'TestLoop')
        loop = LOOPS.build(
            loop_cfg,
            default_args=dict(
                runner=self.runner,
                dataloader=loader_cfg,
                evaluator=copy.deepcopy(self.cfg.test_evaluator)))
        # Hooks and the log processor find the current loop on the runner;
        # mmengine 0.10 has no public way to give a built runner another
        # test loop.
        self.runner._test_loop = loop
        metrics = loop.run()
        return {
            k: round(float(v), 4)
            for k, v in metrics.items() if isinstance(v, numbers.Real)
        }

    def close(self) -> None:
        """Call the ``after_run`` hooks (closes the runner's log files)."""
        self.runner.call_hook('after_run')
