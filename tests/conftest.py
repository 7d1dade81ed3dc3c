"""Shared fixtures: the demo configs shrunk to test size, demo data in tmp."""
import os
import os.path as osp
import signal
import subprocess
import tempfile
from typing import Dict, Optional, Sequence

import pytest
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO = osp.join(ROOT, 'configs', 'demo')
DEMO_ELLIPTICAL = osp.join(
    DEMO, 'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
DEMO_DOT = osp.join(DEMO,
                    'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
TINY_GENERATE = dict(num_train=8, num_val=4, img_size=64, seed=0)


@pytest.fixture(scope='session')
def demo_root(tmp_path_factory) -> str:
    """A small demo dataset generated once per session."""
    from mmseg_elliptical.datasets import generate_demo_shapes
    root = str(tmp_path_factory.mktemp('data') / 'demo_shapes')
    generate_demo_shapes(root, **TINY_GENERATE)
    return root


def tiny_config(path: str, demo_root: str, work_dir: str,
                **overrides) -> Config:
    """A demo config with a 3-layer, 48-dim, 3-head model on the tiny dataset.

    Args:
        path (str): Demo config file.
        demo_root (str): Generated data root.
        work_dir (str): Runner work dir.
        **overrides: Extra ``--cfg-options``-style keys.
    """
    cfg = Config.fromfile(path)
    options = {
        'work_dir': work_dir,
        'model.backbone.num_layers': 3,
        'model.backbone.embed_dims': 48,
        'model.backbone.num_heads': 3,
        'model.decode_head.num_heads': 3,
        'model.decode_head.in_channels': 48,
        'model.decode_head.channels': 48,
        'model.decode_head.embed_dims': 48,
        'train_dataloader.batch_size': 2,
        'train_cfg.max_iters': 4,
        'train_cfg.val_interval': 2,
        'default_hooks.checkpoint.interval': 2,
        'default_hooks.logger.interval': 1,
    }
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options[f'{loader}.dataset.data_root'] = demo_root
        options[f'{loader}.dataset.generate'] = TINY_GENERATE
    options.update(overrides)
    cfg.merge_from_dict(options)
    return cfg


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


def grads(model) -> dict:
    """Gradients of all parameters that received one, by name."""
    return {
        n: p.grad.clone()
        for n, p in model.named_parameters() if p.grad is not None
    }


def saved_bytes(fn):
    """Bytes of the tensors autograd saves for the backward of ``fn()``,
    and what ``fn`` returned."""
    from torch.autograd.graph import saved_tensors_hooks
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(sizes), out


def build_pair(ref_cls, cls, **args):
    """mmseg's backbone ``ref_cls`` and its elliptical version ``cls`` in
    dot-product mode (``elliptical_layers=[]``), each built and initialised
    from seed 0."""
    import torch
    pair = []
    for build, extra in ((ref_cls, {}), (cls, dict(elliptical_layers=[]))):
        torch.manual_seed(0)
        model = build(**extra, **args)
        model.init_weights()
        pair.append(model)
    return pair


def check_interchange(ref, ours) -> None:
    """mmseg's model ``ref`` and the plugin's ``ours`` have the same
    state-dict keys in the same order, load each other's weights strictly,
    and hold the same tensors afterwards (``ref``'s)."""
    import torch
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict(), strict=True)
    ref.load_state_dict(ours.state_dict(), strict=True)
    for (k, a), b in zip(ref.state_dict().items(), ours.state_dict().values()):
        assert torch.equal(a, b), k


def randomise(model) -> None:
    """Relative position tables, q / v biases and qkv weights that matter
    (the default initialisation makes every attention almost uniform)."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            table = 'relative_position_bias_table' in name
            if table or name.endswith(('q_bias', 'v_bias')):
                p.normal_()
            elif 'qkv.weight' in name:
                p.normal_(std=0.3)


def check_with_cp(build, x) -> None:
    """``build(with_cp)`` (a model in train mode): with ``with_cp=True`` the
    forward saves less than half for the backward, and the loss and every
    gradient are those without."""
    import torch
    results = {}
    for with_cp in (False, True):
        model = build(with_cp)
        nbytes, loss = saved_bytes(
            lambda: sum(o.square().mean() for o in model(x)))
        loss.backward()
        results[with_cp] = nbytes, loss.detach(), grads(model)
    (plain_bytes, plain_loss, plain), (cp_bytes, cp_loss, cp) = \
        results[False], results[True]
    assert cp_bytes < plain_bytes / 2, (cp_bytes, plain_bytes)
    torch.testing.assert_close(cp_loss, plain_loss, rtol=0, atol=0)
    assert cp.keys() == plain.keys() and len(plain) > 0
    for name in plain:
        torch.testing.assert_close(
            cp[name], plain[name], rtol=0, atol=1e-6, msg=name)


def check_attention_dropout(attn, run, clean) -> None:
    """``run()`` calls the attention module ``attn`` (built with dropout 0.5
    on the probabilities): in eval mode it gives ``clean`` (the oracle's
    output, without dropout); in train mode other outputs, with fresh masks
    at each call and the same ones under the same seed."""
    import torch
    attn.eval()
    torch.testing.assert_close(run(), clean, atol=1e-5, rtol=1e-5)
    attn.train()
    torch.manual_seed(1)
    first, second = run(), run()
    assert not torch.allclose(first, clean, atol=1e-3)
    assert not torch.allclose(first, second, atol=1e-3)
    torch.manual_seed(1)
    torch.testing.assert_close(run(), first)


def saved_scores_bytes(model, x, n: int) -> int:
    """Bytes of the distinct ``[..., n, n]`` tensors (attention scores or
    probabilities) that a training forward of ``model`` saves."""
    from torch.autograd.graph import saved_tensors_hooks
    squares = {}

    def pack(t):
        if t.shape[-2:] == (n, n):
            squares[t.untyped_storage().data_ptr()] = t.nbytes
        return t

    model.train()
    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(squares.values())


def check_bf16(model, x, how: str) -> None:
    """Under CPU bf16 autocast (forward and backward) or as a bf16 model
    (``model.bfloat16()``): finite outputs and gradients, close to fp32's
    but not equal (so bf16 was in effect). ``model`` is in eval mode."""
    import torch
    with torch.no_grad():
        ref = model(x)[-1]
    if how == 'autocast':
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = model(x)[-1]
    else:
        out = model.bfloat16()(x.bfloat16())[-1]
        assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)
    # bf16 keeps ~3 significant digits.
    err = (out.float() - ref).abs().max() / ref.abs().max()
    assert 0 < err < 0.1, err


def check_compiled(model, x, fullgraph: bool = True) -> list:
    """``torch.compile(model)`` (backend ``aot_eager``: the graph torch
    traces, without inductor's kernels) gives eager's outputs and gradients
    in train mode, and eager's outputs in eval mode without grad (the two
    ways the value chain runs). ``model`` has no dropout. ``fullgraph``:
    one graph, no breaks. Returns the compiled outputs of the train step."""
    import torch

    def train_step(fn):
        model.zero_grad()
        outs = fn(x)
        sum(o.square().mean() for o in outs).backward()
        return [o.detach() for o in outs], grads(model)

    torch._dynamo.reset()
    try:
        model.train()
        compiled = torch.compile(
            model, backend='aot_eager', fullgraph=fullgraph)
        (outs, g), (ref_outs, ref_g) = train_step(compiled), train_step(model)
        train_outs = list(outs)
        model.eval()
        with torch.no_grad():
            outs += compiled(x)
            ref_outs += model(x)
    finally:
        torch._dynamo.reset()
    for a, b in zip(outs, ref_outs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert g.keys() == ref_g.keys() and len(g) > 0
    for name in ref_g:
        torch.testing.assert_close(
            g[name], ref_g[name], atol=1e-6, rtol=1e-5, msg=name)
    return train_outs


def run_command(
        args: Sequence[str],
        timeout: float = 300,
        env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``args`` in the repository root to a zero exit status.

    The test fails with the output's tail on another exit status, or when the
    command has not finished after ``timeout`` seconds: its process group
    (the command runs in a session of its own: a shell script and the
    torchrun it starts) then gets SIGTERM, on which torchrun stops its
    workers (they run in sessions of their own), and SIGKILL 30 s later.
    The output goes through files, so a process left behind cannot block
    the test on a pipe.

    Args:
        args (Sequence[str]): The command line.
        timeout (float): Seconds. Defaults to 300.
        env (dict, optional): The environment. Defaults to this process's
            with ``OMP_NUM_THREADS=1``.

    Returns:
        subprocess.CompletedProcess: With ``stdout`` and ``stderr`` (str).
    """
    if env is None:
        env = dict(os.environ, OMP_NUM_THREADS='1')
    with tempfile.TemporaryFile('w+') as out, \
            tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True)
        try:
            proc.wait(timeout)
            failure = f'exit status {proc.returncode}' \
                if proc.returncode else None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            failure = f'not finished after {timeout} s'
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if failure:
        pytest.fail(
            f'{" ".join(args)[-300:]}: {failure}\n'
            f'--- stdout:\n{stdout[-2000:]}\n'
            f'--- stderr:\n{stderr[-4000:]}',
            pytrace=False)
    return subprocess.CompletedProcess(args, 0, stdout, stderr)


def load_tool(path: str):
    """The module of a command-line tool, e.g.
    ``load_tool('analysis_tools/collapse.py')`` (under ``tools/``)."""
    import importlib.util
    name = 'tool_' + osp.splitext(path)[0].replace('/', '_')
    spec = importlib.util.spec_from_file_location(
        name, osp.join(ROOT, 'tools', path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
