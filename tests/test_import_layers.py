"""The package's four layers: imports run downwards (shared/DESIGN.md), with
no circle among modules, function-level imports included."""
import ast
import os.path as osp
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

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
#: extra of setup.py; docs/install.md; google.protobuf: onnx's), never the
#: package's own code (but a module that imports one at its top).
OPTIONAL = ('mmdet', 'onnx', 'onnxruntime', 'onnxscript', 'triton', 'submitit',
            'tensorboard', 'imagecorruptions', 'google.protobuf')
#: Imported where a registered component first runs, not on its import:
#: kept out of ``import mmseg_elliptical`` (the evidence hook draws,
#: ``utils/output.py``'s ``pyplot``; the certification loop's p-values).
LAZY = ('matplotlib', 'scipy.stats')
#: The one import of the package's own code under an ``if``: the deferral
#: of the registration (docs/reliability.md, "The tools").
DEFERRED = ('mmseg_elliptical', 'mmseg_elliptical.plugin')
#: The tools, each argparse and a ``main``; only ``main`` imports inside.
TOOLS = ROOT.parent / 'tools'
#: Imported at call time: the hook runs at every interpreter's start.
STARTUP = ('misc/mmcv_ext_standin.py', 'mmseg_elliptical.errors')


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


def outside(name: str, roots: Sequence[str]) -> bool:
    return not any(name == r or name.startswith(f'{r}.') for r in roots)


def names_of(node: ast.AST) -> List[str]:
    """What an import statement names (``.`` and ``..`` for relative)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return ['.' * node.level + (node.module or '')]


def nested_imports(path: Path) -> Iterator[Tuple[ast.AST, List[str]]]:
    """Each import not in the module's top-level body, with the names of
    the functions around it (outermost first)."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}

    def walk(node: ast.AST, functions: List[str]):
        for child in ast.iter_child_nodes(node):
            inner = functions + [child.name] if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef)) else functions
            if isinstance(child, (ast.Import, ast.ImportFrom)) and \
                    id(child) not in top:
                yield child, inner
            yield from walk(child, inner)

    yield from walk(tree, [])


def misplaced_imports(root: Path = ROOT, tools: Path = TOOLS) -> List[str]:
    """The imports that are not at a module's top: in the package, all but
    those of :data:`OPTIONAL` and :data:`LAZY` modules (or of the package's
    modules that import an optional one at their top) and
    :data:`DEFERRED`; in ``tools``, all but those inside a top-level
    ``main`` (and :data:`STARTUP`)."""
    modules = package_modules(root)
    needs_optional = {
        module
        for module, path in modules.items()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not all(
            outside(n, OPTIONAL) for n in names_of(node))
    }
    bad = []
    for module, path in modules.items():
        for node, _ in nested_imports(path):
            names = names_of(node)
            if all(outside(n, [PACKAGE]) and n[0] != '.' for n in names):
                allowed = not all(outside(n, OPTIONAL + LAZY) for n in names)
            else:
                allowed = all(
                    t in needs_optional or (module, t) == DEFERRED
                    for t in imported(node, module, path.name == '__init__.py',
                                      modules))
            if not allowed:
                bad.append(f'{module}:{node.lineno} imports '
                           f'{", ".join(names)}')
    for path in sorted(tools.rglob('*.py')):
        tool = str(path.relative_to(tools))
        for node, functions in nested_imports(path):
            names = names_of(node)
            if functions != ['main'] and (tool, *names) != STARTUP:
                where = '/'.join(functions) or 'the module, nested'
                bad.append(f'tools/{tool}:{node.lineno} ({where}) imports '
                           f'{", ".join(names)}')
    return bad


def test_imports_sit_at_the_top() -> None:
    """Imports at the top of modules, as mmseg's: what a tool needs after
    its checks comes in its ``main``, what a function needs at the top of
    its module."""
    assert misplaced_imports() == []


def test_the_import_check_sees_misplaced_imports(tmp_path) -> None:
    pkg, tools = tmp_path / PACKAGE, tmp_path / 'tools'
    (pkg / 'utils').mkdir(parents=True)
    tools.mkdir()
    (pkg / '__init__.py').write_text('if True:\n    from . import plugin\n')
    (pkg / 'plugin.py').write_text('')
    (pkg / 'utils' / '__init__.py').write_text('')
    (pkg / 'utils' / 'a.py').write_text(
        'def f():\n    import onnx\n    import matplotlib.pyplot\n'
        '    import torch\n    from . import b\n    from . import c\n')
    (pkg / 'utils' / 'b.py').write_text('import mmdet\n')
    (pkg / 'utils' / 'c.py').write_text('import os\n')
    (tools / 't.py').write_text(
        'def parse_args():\n    import torch\n\n\ndef main():\n'
        '    import torch\n    def inner():\n        import os\n')
    assert misplaced_imports(pkg, tools) == [
        f'{PACKAGE}.utils.a:4 imports torch',
        f'{PACKAGE}.utils.a:6 imports .',
        'tools/t.py:2 (parse_args) imports torch',
        'tools/t.py:8 (main/inner) imports os',
    ]


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


def test_the_plugin_import_leaves_pyplot_out() -> None:
    """Nor matplotlib's pyplot (~0.5 s): the first figure imports it. Run
    without mmdet, the optional extra, which imports pyplot itself."""
    import subprocess
    import sys
    code = ('import sys; sys.modules["mmdet"] = None; import mmseg_elliptical'
            '; print("matplotlib.pyplot" in sys.modules)')
    proc = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.stdout.splitlines()[-1] == 'False', proc.stderr[-2000:]
