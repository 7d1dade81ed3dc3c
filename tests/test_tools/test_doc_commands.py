"""The commands of the README and docs/ run as printed: each command line
that names the demo files, or a template whose placeholders are the twins'
(``ell.py ell.pth dot.py dot.pth``, ``CONFIG CHECKPOINT``, ``IMAGE``), passes
the check ``tools/dist_launch.sh`` runs before torchrun
(``tools/check_args.py``), in a folder laid out as after ``make demo`` and
``make demo-dot``: the demo configs, checkpoints of their models where
training saves them, the demo images."""
import os
import os.path as osp
import re
import shlex
import sys
from typing import Iterator, List, Optional

import pytest
import torch
from builders import ROOT
from mmengine.runner.checkpoint import save_checkpoint

ELL_CFG = 'configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_' \
    'demo-shapes-64x64.py'
DOT_CFG = 'configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-' \
    '64x64.py'
ELL_CKPT = 'work_dirs/demo_elliptical/iter_3000.pth'
DOT_CKPT = 'work_dirs/demo_dot/iter_3000.pth'
IMAGE = 'data/demo_shapes/images/validation/demo_00002.jpg'
DEMO_FILES = ('configs/demo/', 'work_dirs/demo_', 'data/demo_shapes/')
#: Placeholders that stand for the demo files, and the alternating pairs.
PLACEHOLDERS = {
    'ell.py': ELL_CFG,
    'ELL.py': ELL_CFG,
    'ell.pth': ELL_CKPT,
    'ELL.pth': ELL_CKPT,
    'dot.py': DOT_CFG,
    'DOT.py': DOT_CFG,
    'dot.pth': DOT_CKPT,
    'DOT.pth': DOT_CKPT,
    'IMAGE': IMAGE,
    'CKPT': ELL_CKPT,
    'PARTITION': 'partition',
    'JOB_NAME': 'job',
}
PAIRED = {'CONFIG': (ELL_CFG, DOT_CFG), 'CHECKPOINT': (ELL_CKPT, DOT_CKPT)}
#: Launch script: its command line as the tool's (check_args.py's argv).
LAUNCHERS = {
    'dist_train.sh': lambda a: ['train.py', a[0], *a[2:]],
    'dist_test.sh': lambda a: ['test.py', a[0], a[1], *a[3:]],
    'dist_robustness.sh': lambda a: ['analysis_tools/robustness.py', *a[1:]],
    'dist_adversarial.sh': lambda a: ['analysis_tools/adversarial.py', *a[1:]],
    'dist_certify.sh': lambda a: ['analysis_tools/certify.py', *a[1:]],
    'dist_launch.sh': lambda a: [a[0], *a[2:]],
    'slurm_train.sh': lambda a: ['train.py', *a[2:]],
    'slurm_test.sh': lambda a: ['test.py', *a[2:]],
    'slurm_robustness.sh': lambda a: ['analysis_tools/robustness.py', *a[2:]],
    'slurm_adversarial.sh':
    lambda a: ['analysis_tools/adversarial.py', *a[2:]],
    'slurm_certify.sh': lambda a: ['analysis_tools/certify.py', *a[2:]],
    'slurm_launch.sh': lambda a: [a[0], *a[3:]],
}


def doc_files() -> List[str]:
    docs = osp.join(ROOT, 'docs')
    return [osp.join(ROOT, 'README.md')] + sorted(
        osp.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))


def command_texts(markdown: str) -> Iterator[str]:
    """The lines of shell code blocks (continuations joined) and the inline
    code spans (across line breaks)."""
    # Fences pair in order; only unlabelled and shell blocks are commands.
    for lang, block in re.findall(r'^```(\w*)\n(.*?)^```', markdown,
                                  re.M | re.S):
        if lang in ('', 'bash', 'shell', 'sh'):
            yield from block.replace('\\\n', ' ').splitlines()
    outside = re.sub(r'^```.*?^```', '', markdown, flags=re.M | re.S)
    for span in re.findall(r'`([^`]+)`', outside):
        yield span.replace('\n', ' ')


def is_template(word: str) -> bool:
    """A usage line's word: ``[optional]``, ``...``, an unnamed ``X``."""
    return bool(re.search(r'[\[\]]|\.\.\.', word)) or \
        re.fullmatch(r'[A-Z][A-Z_0-9]*', word) is not None


def tool_argv(text: str) -> Optional[List[str]]:
    """``[TOOL, args...]`` of a command that runs one of the tools, with the
    placeholders replaced; None for anything else, and for a usage line
    (visibly a template)."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    while words and re.match(r'^[A-Z_]+=', words[0]):  # environment
        words = words[1:]
    if words and (words[0] in ('python', 'bash')
                  or words[0].endswith('/python')):
        words = words[1:]
    if not words or not words[0].startswith('tools/'):
        return None
    seen = dict.fromkeys(PAIRED, 0)
    args = []
    for word in words[1:]:
        if word in PAIRED:
            args.append(PAIRED[word][seen[word] % 2])
            seen[word] += 1
        else:
            args.append(PLACEHOLDERS.get(word, word))
    if any(is_template(a) for a in args):
        return None
    script = words[0][len('tools/'):]
    if script in LAUNCHERS:  # a bare script name in the text: no command
        return LAUNCHERS[script](args) if len(args) >= 2 else None
    return [script, *args] if script.endswith('.py') else None


def demo_commands() -> List[tuple]:
    """``(doc, text, argv)`` of every command to check."""
    found = []
    for path in doc_files():
        with open(path) as f:
            for text in command_texts(f.read()):
                argv = tool_argv(text)
                if argv and any(d in a for a in argv for d in DEMO_FILES):
                    found.append((osp.relpath(path, ROOT), text, argv))
    return found


COMMANDS = demo_commands()


def test_the_docs_hold_demo_commands():
    # The extraction itself: the commands of make demo, make report, the
    # README's robustness and adversarial grids on a cluster.
    tools = {argv[0] for _, _, argv in COMMANDS}
    assert {
        'train.py', 'analysis_tools/compare_models.py',
        'analysis_tools/robustness.py', 'analysis_tools/adversarial.py'
    } <= tools, COMMANDS


@pytest.fixture(scope='module')
def after_make_demo(tmp_path_factory) -> str:
    """A folder as after ``make demo`` and ``make demo-dot``."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from mmseg_elliptical.datasets import generate_demo_shapes
    root = tmp_path_factory.mktemp('after_make_demo')
    os.symlink(osp.join(ROOT, 'configs'), root / 'configs')
    # The demo config's own scenes (~10 s): a documented apgd-mce-bal
    # command counts the training set's classes in its launch check.
    generate = Config.fromfile(osp.join(
        ROOT, ELL_CFG)).train_dataloader.dataset.generate
    generate_demo_shapes(str(root / 'data' / 'demo_shapes'), **generate)
    init_default_scope('mmseg')
    for config, checkpoint in ((ELL_CFG, ELL_CKPT), (DOT_CFG, DOT_CKPT)):
        cfg = Config.fromfile(osp.join(ROOT, config))
        cfg.model.pretrained = None
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        save_checkpoint({'state_dict': model.state_dict()},
                        str(root / checkpoint))
    return str(root)


@pytest.mark.parametrize(
    'doc, text, argv',
    COMMANDS,
    ids=[f'{d}:{a[0]}-{i}' for i, (d, _, a) in enumerate(COMMANDS)])
def test_a_documented_command_passes_the_launch_check(doc, text, argv,
                                                      after_make_demo,
                                                      monkeypatch, capsys,
                                                      request):
    sys.path.insert(0, osp.join(ROOT, 'tools'))
    try:
        import check_args
    finally:
        sys.path.pop(0)
    monkeypatch.chdir(after_make_demo)
    monkeypatch.setattr(sys, 'argv', list(sys.argv))
    if 'slurm' in argv:  # checked as on its login node
        request.getfixturevalue('srun_on_path')
    # check_args sets it for torchrun: restored after (test_launch.py).
    monkeypatch.setattr('mmseg_elliptical.utils.preflight.LAUNCHING', False)
    try:
        check_args.main(argv)
    except SystemExit as stop:
        pytest.fail(f'{doc}: {text}\nexit {stop.code}: '
                    f'{capsys.readouterr().err[-1500:]}')
