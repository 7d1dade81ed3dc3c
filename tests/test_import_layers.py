"""The package's four layers: imports run downwards (shared/DESIGN.md), with
no circle among modules, function-level imports included."""
import ast
import os.path as osp
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import mmseg_elliptical

ROOT = Path(osp.dirname(mmseg_elliptical.__file__))
PACKAGE = 'mmseg_elliptical'
#: The four layers, bottom first, each a set of the package's top-level
#: modules and subpackages: core, the toolkits side by side, the engine,
#: and what the package's ``__init__`` imports (``plugin``; the tools under
#: ``tools/`` sit above all). A module may import its own layer and below;
#: written down once, here; docs/install.md's "Where things are" follows it.
LAYERS = (
    ('_quiet', 'errors', 'utils', 'models', 'datasets', 'transforms',
     'evaluation'),  # _quiet: the warning filter the package imports first
    ('robustness', 'analysis', 'benchmark', 'deploy', 'converters'),
    ('engine', ),
    ('plugin', ),
)
LAYER = {part: level for level, parts in enumerate(LAYERS) for part in parts}
TOP = len(LAYERS)  # the package's __init__ sits above all
#: What a function-level import may load: an optional dependency (an
#: extra of setup.py; docs/install.md), never the package's own code.
OPTIONAL = ('mmdet', 'onnx', 'onnxruntime', 'onnxscript', 'triton', 'submitit',
            'tensorboard', 'imagecorruptions')


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix('').parts]
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def package_modules(root: Path = ROOT) -> Dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob('*.py'))}


def imported(node: ast.AST, module: str, is_package: bool,
             modules: Dict[str, Path]) -> List[str]:
    """The package modules an import statement loads (the most specific
    module each name resolves to)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ''
        if node.level:
            parts = module.split('.')
            parts = parts if is_package else parts[:-1]
            parts = parts[:len(parts) - node.level + 1]
            base = '.'.join(parts + ([node.module] if node.module else []))
        names = [
            f'{base}.{a.name}' if f'{base}.{a.name}' in modules else base
            for a in node.names
        ]
    found = []
    for name in names:
        if name.split('.')[0] != PACKAGE:
            continue
        while name not in modules:
            name = name.rsplit('.', 1)[0]
        found.append(name)
    return found


def import_graph(
    root: Path = ROOT
) -> Tuple[Dict[str, Set[str]], List[Tuple[str, int, str, bool]]]:
    """Edges between package modules, and every import as
    ``(module, line, target, nested)``: nested when inside a function, a
    class, an ``if`` or a ``try``."""
    modules = package_modules(root)
    edges: Dict[str, Set[str]] = {m: set() for m in modules}
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in imported(node, module, path.name == '__init__.py',
                                   modules):
                if target != module:
                    edges[module].add(target)
                    found.append((module, node.lineno, target, id(node)
                                  not in top))
    return edges, found


def part_of(module: str) -> Optional[str]:
    """The top-level module or subpackage of the package that holds
    ``module`` (None: the package's ``__init__``)."""
    parts = module.split('.')[1:]
    return parts[0] if parts else None


def layer(module: str) -> int:
    part = part_of(module)
    return TOP if part is None else LAYER[part]


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module
    (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    """Every top-level module and subpackage is in a layer, and every
    layer's part exists."""
    modules = package_modules()
    homeless = sorted({
        part_of(m)
        for m in modules if part_of(m) is not None and part_of(m) not in LAYER
    })
    assert homeless == []
    missing = [p for p in LAYER if f'{PACKAGE}.{p}' not in modules]
    assert missing == []


def test_no_import_circle() -> None:
    edges, _ = import_graph()
    assert cycles(edges) == []


def test_imports_run_downwards() -> None:
    _, found = import_graph()
    up = [
        f'{m}:{line} imports {t}' for m, line, t, _ in found
        if layer(t) > layer(m)
    ]
    assert up == []


def test_the_toolkits_import_each_other_without_a_circle() -> None:
    """Side by side, the toolkits may use each other, one way only."""
    edges, _ = import_graph()
    toolkits = set(LAYERS[1])
    between: Dict[str, Set[str]] = {t: set() for t in toolkits}
    for module, targets in edges.items():
        for target in targets:
            a, b = part_of(module), part_of(target)
            if a in toolkits and b in toolkits and a != b:
                between[a].add(b)
    assert cycles(between) == []


def test_utils_import_only_errors() -> None:
    _, found = import_graph()
    bad = [(m, t) for m, _, t, _ in found if m.startswith(f'{PACKAGE}.utils')
           and not t.startswith((f'{PACKAGE}.utils', f'{PACKAGE}.errors'))]
    assert bad == []


def test_the_checks_see_circles_and_layers(tmp_path) -> None:
    """The graph and the checks on a small package written here: a circle
    hidden in a function, and a core module that imports a toolkit."""
    pkg = tmp_path / PACKAGE
    for sub in ('utils', 'robustness'):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / '__init__.py').write_text('')
    (pkg / '__init__.py').write_text('')
    (pkg / 'utils' /
     'a.py').write_text('def f():\n    from ..robustness import b\n')
    (pkg / 'robustness' / 'b.py').write_text('from ..utils import a\n')
    edges, found = import_graph(pkg)
    assert cycles(edges) == [[f'{PACKAGE}.robustness.b', f'{PACKAGE}.utils.a']]
    assert (f'{PACKAGE}.utils.a', 2, f'{PACKAGE}.robustness.b', True) in found
    up = [(m, t) for m, _, t, _ in found if layer(t) > layer(m)]
    assert up == [(f'{PACKAGE}.utils.a', f'{PACKAGE}.robustness.b')]


def test_no_module_shadows_the_standard_library() -> None:
    import sys
    shadows = [
        str(p) for p in ROOT.rglob('*.py') if p.stem in sys.stdlib_module_names
    ]
    assert shadows == []


def test_basenames_repeat_only_for_a_family() -> None:
    """Inside one layer part, two modules share a name only as one
    family's attention and backbone (``attention/swin.py``,
    ``backbones/swin.py``), as mmseg's do, or as the threats' and the
    grid's own modules of :mod:`mmseg_elliptical.robustness` (each threat
    has its ``cells``, ``verdicts`` and ``report``); no ``models.py``
    outside ``models/``."""
    families = {ROOT / 'models' / 'attention', ROOT / 'models' / 'backbones'}
    families |= {p for p in (ROOT / 'robustness').iterdir() if p.is_dir()}
    seen: Dict[Tuple[str, str], List[Path]] = {}
    for path in ROOT.rglob('*.py'):
        if path.name != '__init__.py':
            part = path.relative_to(ROOT).parts[0]
            seen.setdefault((part, path.name), []).append(path)
    repeated = {
        name: paths
        for name, paths in seen.items()
        if len(paths) > 1 and not all(p.parent in families for p in paths)
    }
    assert repeated == {}
    assert all(name != 'models.py' for _, name in seen)


def test_the_plugin_import_leaves_scipy_stats_out() -> None:
    """``import mmseg_elliptical`` (every config's ``custom_imports``) does
    not pay for scipy.stats (~0.2 s), which only the paired test needs."""
    import subprocess
    import sys
    code = 'import sys, mmseg_elliptical; print("scipy.stats" in sys.modules)'
    proc = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.stdout.splitlines()[-1] == 'False', proc.stderr[-2000:]


def test_the_plugin_import_registers_every_component() -> None:
    """``import mmseg_elliptical`` alone registers every class the package
    registers (``@REGISTRY.register_module()``), the grid's test loops
    included, whichever module a caller imports next; but the deploy
    extra's ONNXRuntimeSegmentor, registered where ``deploy`` is imported
    (it needs onnxruntime)."""
    import subprocess
    import sys
    names = sorted({
        node.name
        for path in ROOT.rglob('*.py') if 'deploy' not in path.parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any(
            isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
            and d.func.attr == 'register_module' for d in node.decorator_list)
    })
    code = ('import sys, mmseg_elliptical\n'
            'from mmengine.registry import DefaultScope\n'
            'from mmseg import registry as r\n'
            'found = set()\n'
            'for reg in (r.MODELS, r.LOOPS, r.HOOKS, r.METRICS, r.DATASETS,\n'
            '            r.TRANSFORMS, r.RUNNERS):\n'
            '    found |= set(reg.module_dict)\n'
            'print(" ".join(n for n in sys.argv[1:] if n not in found))')
    proc = subprocess.run([sys.executable, '-c', code, *names],
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(names) > 20 and proc.stdout.split() == []
