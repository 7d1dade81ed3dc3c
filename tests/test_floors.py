"""The package's floors: imports run downwards (shared/DESIGN.md), with no
circle among modules, function-level imports included."""
import ast
import os.path as osp
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import mmseg_elliptical

ROOT = Path(osp.dirname(mmseg_elliptical.__file__))
PACKAGE = 'mmseg_elliptical'
#: The floors, bottom first: the package's subpackages and the rooms inside
#: them (dotted paths under the package). A module sits on the floor of the
#: longest room that holds it and may import its own floor and below; a
#: package's ``__init__`` that belongs to no room sits on the highest floor
#: of the rooms inside it (it gathers them). Written down once, here;
#: docs/install.md's "where things are" table follows it.
ROOMS = (
    ('_quiet', 'errors', 'utils'),  # _quiet: the warning filter the
    # package's __init__ imports first
    ('models', 'datasets', 'transforms', 'evaluation'),
    ('deploy', 'converters'),
    ('benchmark', ),
    ('analysis.loaders', 'analysis.seed_runs'),
    ('analysis.robustness.attacks', ),
    ('analysis.robustness.grid', ),
    ('analysis.robustness.verdicts', ),
    ('analysis.robustness.reports', ),
    ('analysis.evidence', ),
    ('analysis.comparison', ),
    ('engine', ),
    ('plugin', ),  # what the package's __init__ imports: every room
)
FLOORS = {room: level for level, rooms in enumerate(ROOMS) for room in rooms}
TOP = len(ROOMS)  # the package's __init__ sits above all
#: Words of the comment that must explain a nested import of the package's
#: own code: only an optional dependency justifies one, or the plugin's
#: registration, which the package's __init__ defers under a tool that
#: checks its arguments first.
OPTIONAL = ('mmdet', 'onnx', 'optional', 'deferred')


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


def room_of(module: str) -> Optional[str]:
    """The longest room of :data:`FLOORS` that holds ``module`` (None: no
    room, a package's ``__init__`` above several)."""
    parts = module.split('.')[1:]
    for n in range(len(parts), 0, -1):
        if '.'.join(parts[:n]) in FLOORS:
            return '.'.join(parts[:n])
    return None


def floor(module: str) -> int:
    room = room_of(module)
    if room is not None:
        return FLOORS[room]
    inside = '.'.join(module.split('.')[1:])
    below = [
        f for r, f in FLOORS.items() if inside and r.startswith(inside + '.')
    ]
    return max(below) if below else TOP


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


def test_every_module_has_a_room() -> None:
    """Every module but a package's gathering ``__init__`` is in a room,
    and every room exists."""
    modules = package_modules()
    homeless = [
        m for m, p in modules.items()
        if room_of(m) is None and p.name != '__init__.py'
    ]
    assert homeless == []
    missing = [r for r in FLOORS if f'{PACKAGE}.{r}' not in modules]
    assert missing == []


def test_no_import_circle() -> None:
    edges, _ = import_graph()
    assert cycles(edges) == []


def test_imports_run_downwards() -> None:
    _, found = import_graph()
    up = [
        f'{m}:{line} imports {t}' for m, line, t, _ in found
        if floor(t) > floor(m)
    ]
    assert up == []


def test_utils_import_only_errors() -> None:
    _, found = import_graph()
    bad = [(m, t) for m, _, t, _ in found if m.startswith(f'{PACKAGE}.utils')
           and not t.startswith((f'{PACKAGE}.utils', f'{PACKAGE}.errors'))]
    assert bad == []


def test_nested_imports_say_which_optional_dependency() -> None:
    _, found = import_graph()
    bad = []
    for module, line, target, nested in found:
        if not nested:
            continue
        text = package_modules()[module].read_text().splitlines()[line - 1]
        comment = text.partition('#')[2].lower()
        if not any(word in comment for word in OPTIONAL):
            bad.append(f'{module}:{line} imports {target}')
    assert bad == []


def test_the_checks_see_circles_and_floors(tmp_path) -> None:
    """The graph and the checks on a small package written here: a circle
    hidden in a function, and a bottom module that imports upwards."""
    pkg = tmp_path / PACKAGE
    for sub in ('utils', 'models'):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / '__init__.py').write_text('')
    (pkg / '__init__.py').write_text('')
    (pkg / 'utils' /
     'a.py').write_text('def f():\n    from ..models import b\n')
    (pkg / 'models' / 'b.py').write_text('from ..utils import a\n')
    edges, found = import_graph(pkg)
    assert cycles(edges) == [[f'{PACKAGE}.models.b', f'{PACKAGE}.utils.a']]
    assert (f'{PACKAGE}.utils.a', 2, f'{PACKAGE}.models.b', True) in found
    up = [(m, t) for m, _, t, _ in found if floor(t) > floor(m)]
    assert up == [(f'{PACKAGE}.utils.a', f'{PACKAGE}.models.b')]


def test_the_checks_see_an_import_up_between_rooms(tmp_path) -> None:
    """Rooms inside a subpackage have floors of their own: the grid may
    import the attacks, not the verdicts; the benchmark may not import the
    analysis; a gathering ``__init__`` sits above its rooms."""
    pkg = tmp_path / PACKAGE
    rooms = pkg / 'analysis' / 'robustness'
    for sub in (pkg, pkg / 'benchmark', pkg / 'analysis', rooms,
                rooms / 'attacks', rooms / 'grid', rooms / 'verdicts'):
        sub.mkdir(parents=True, exist_ok=True)
        (sub / '__init__.py').write_text('')
    (rooms / '__init__.py').write_text('from .verdicts import v\n')
    (rooms / 'attacks' / 'a.py').write_text('')
    (rooms / 'verdicts' / 'v.py').write_text('from ..grid import g\n')
    (rooms / 'grid' /
     'g.py').write_text('from ..attacks import a\nfrom ..verdicts import v\n')
    (pkg / 'benchmark' /
     'b.py').write_text('from ..analysis.robustness.attacks import a\n')
    _, found = import_graph(pkg)
    up = sorted((m.split('.', 1)[1], t.split('.', 1)[1])
                for m, _, t, _ in found if floor(t) > floor(m))
    assert up == [('analysis.robustness.grid.g',
                   'analysis.robustness.verdicts.v'),
                  ('benchmark.b', 'analysis.robustness.attacks.a')]


def test_no_module_shadows_the_standard_library() -> None:
    import sys
    shadows = [
        str(p) for p in ROOT.rglob('*.py') if p.stem in sys.stdlib_module_names
    ]
    assert shadows == []


def test_basenames_repeat_only_for_a_family() -> None:
    """Two modules share a name only as one family's attention and
    backbone (``attention/swin.py``, ``backbones/swin.py``), as mmseg's do,
    or as one threat's verdicts and report (``verdicts/attacks.py``,
    ``reports/attacks.py``); no ``models.py`` outside ``models/``."""
    robustness = ROOT / 'analysis' / 'robustness'
    families = {
        ROOT / 'models' / 'attention', ROOT / 'models' / 'backbones',
        robustness / 'verdicts', robustness / 'reports'
    }
    seen: Dict[str, List[Path]] = {}
    for path in ROOT.rglob('*.py'):
        if path.name != '__init__.py':
            seen.setdefault(path.name, []).append(path)
    repeated = {
        name: paths
        for name, paths in seen.items()
        if len(paths) > 1 and not all(p.parent in families for p in paths)
    }
    assert repeated == {}
    assert 'models.py' not in seen


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
