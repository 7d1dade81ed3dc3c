"""Fixtures shared by the tests. The support modules (``builders``,
``shipped_configs``, ``bench_builders``, ``onnx_builders``, ``saved_models``,
``checks``, ``spies``, ``processes``, ``slurm_cluster``, ``demo_losses``) and
the oracles are
registered for pytest's assert rewriting, so their asserts report as the
tests' own."""
import os
import shutil
import sys
import tempfile

import pytest

pytest.register_assert_rewrite('attack_oracles', 'bench_builders', 'builders',
                               'checks', 'evidence_oracles', 'onnx_builders',
                               'oracles', 'processes', 'saved_models',
                               'shipped_configs', 'slurm_cluster', 'spies',
                               'demo_losses')

import builders  # noqa: E402
import processes  # noqa: E402
import saved_models  # noqa: E402
import slurm_cluster  # noqa: E402


@pytest.fixture(scope='session')
def demo_root(tmp_path_factory) -> str:
    """A small demo dataset generated once per session."""
    from mmseg_elliptical.datasets import generate_demo_shapes
    root = str(tmp_path_factory.mktemp('data') / 'demo_shapes')
    generate_demo_shapes(root, **builders.TINY_GENERATE)
    return root


@pytest.fixture(scope='module')
def single_thread():
    """Run a module's tests with one torch thread, then restore the count.

    On a shared 2-core machine two OpenMP threads spin-wait on each other
    whenever another process holds a core: the tiny test models then run up
    to 100x slower than with one thread. Subprocesses get
    ``OMP_NUM_THREADS=1`` from the tests that start them.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='session')
def demo_models(demo_root, tmp_path_factory):
    """Config and random-weight checkpoint of a tiny elliptical demo model
    and its dot-product twin (same weights).

    Returns:
        list[str]: ``[config, checkpoint, config, checkpoint]``.
    """
    tmp = tmp_path_factory.mktemp('demo_models')
    paths = []
    for name, path in (('ell', builders.DEMO_ELLIPTICAL), ('dot',
                                                           builders.DEMO_DOT)):
        cfg = builders.demo_config(path, demo_root, str(tmp / f'wd_{name}'))
        paths += saved_models.save_model(cfg, str(tmp / f'{name}.py'))
    return paths


@pytest.fixture(scope='session')
def other_vit(demo_root, tmp_path_factory) -> str:
    """The checkpoint of another ViT than :func:`demo_models`' (4 layers of
    64 dims and 4 heads, not 3 of 48 and 3): one that does not fit them."""
    tmp = tmp_path_factory.mktemp('other_vit')
    cfg = builders.demo_config(builders.DEMO_DOT, demo_root, str(tmp / 'wd'))
    dims = ('backbone.embed_dims', 'decode_head.in_channels',
            'decode_head.channels', 'decode_head.embed_dims')
    cfg.merge_from_dict({
        'model.backbone.num_layers': 4,
        'model.backbone.num_heads': 4,
        'model.decode_head.num_heads': 4,
        **{
            f'model.{k}': 64
            for k in dims
        }
    })
    return saved_models.save_model(cfg, str(tmp / 'other.py'))[1]


@pytest.fixture(scope='session')
def family_models(demo_root, tmp_path_factory):
    """``{family: [config, checkpoint]}`` of every tiny backbone."""
    tmp = tmp_path_factory.mktemp('family_models')
    return {
        family:
        saved_models.save_model(
            saved_models.family_config(family, demo_root,
                                       str(tmp / f'wd_{family}')),
            str(tmp / f'{family}.py'))
        for family in builders.BACKBONES
    }


@pytest.fixture(scope='session')
def slurm_session():
    """A real single-node Slurm (``tests/slurm_cluster.py``), started at
    the first test that needs it and stopped at the end of the session; the
    test skips with one line where it cannot start (fails instead under
    ``MMSEG_ELLIPTICAL_NEED_SLURM=1``, as .ci/run sets it)."""
    why = slurm_cluster.missing()
    if why:
        if os.environ.get('MMSEG_ELLIPTICAL_NEED_SLURM') == '1':
            pytest.fail(f'{slurm_cluster.HOW_TO_RUN} ({why})', pytrace=False)
        pytest.skip(f'{slurm_cluster.HOW_TO_RUN} ({why})')
    # Not under pytest's base folder: another pytest session on the machine
    # may delete that while this one runs.
    folder = tempfile.mkdtemp(prefix='mmseg-elliptical-slurm-')
    cluster = slurm_cluster.start(folder)
    yield cluster
    slurm_cluster.stop(cluster)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def slurm(slurm_session, monkeypatch):
    """:func:`slurm_session` with its ``SLURM_CONF`` in this test's
    environment (the Slurm commands of the tools and of submitit read it)."""
    monkeypatch.setenv('SLURM_CONF', slurm_session.conf)
    yield slurm_session


@pytest.fixture(autouse=True)
def loggers_on_this_tests_output():
    """mmengine's loggers keep the stream they were created with: a logger
    made under an earlier test's captured output (closed since) would print
    logging's own '--- Logging error ---' traceback. Point them at this
    test's."""
    from mmengine.logging import MMLogger
    for logger in MMLogger._instance_dict.values():
        for handler in logger.handlers:
            if getattr(getattr(handler, 'stream', None), 'closed', False):
                handler.stream = sys.stdout
    yield


@pytest.fixture(autouse=True)
def no_launch_variables_left():
    """A test that leaves torchrun's variables (``processes.LAUNCH_VARIABLES``)
    changed in this process's environment fails at its teardown, and they are
    put back (they would reach the launch scripts of later tests: issue 61).
    Torn down after ``monkeypatch``, so what it undoes does not count.

    Not counted: ``LOCAL_RANK=0`` where it was unset, which mmseg's tools and
    ``utils.arguments.launcher_of`` set in a tool run in this process (the
    default, which torchrun replaces in each worker)."""
    before = {k: os.environ.get(k) for k in processes.LAUNCH_VARIABLES}
    yield
    left = {
        k: os.environ.get(k)
        for k in processes.LAUNCH_VARIABLES if os.environ.get(k) != before[k]
    }
    if before['LOCAL_RANK'] is None and left.get('LOCAL_RANK') == '0':
        del left['LOCAL_RANK']
    was = {k: before[k] for k in left}
    for key, value in was.items():
        if value is None:
            del os.environ[key]
        else:
            os.environ[key] = value
    if left:
        pytest.fail(
            f'the test left {left} in os.environ (before it: {was}); '
            'set them through monkeypatch',
            pytrace=False)


@pytest.fixture
def srun_on_path(tmp_path, monkeypatch) -> None:
    """A Slurm login node's PATH where this machine has no Slurm: an
    ``srun`` that is looked up (submitit, ``compare_seeds.py``'s argument
    check), never run (it fails if it is)."""
    if shutil.which('srun') is None:
        srun = tmp_path / 'srun'
        srun.write_text('#!/bin/sh\nexit 1\n')
        srun.chmod(0o755)
        monkeypatch.setenv('PATH',
                           f'{tmp_path}{os.pathsep}{os.environ["PATH"]}')
