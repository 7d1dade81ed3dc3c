"""The package's weight: docstrings and comments are at most 25 % of its lines
(issue 30), counted as the line spans of every module, class and function
docstring (found with ``ast``) plus the lines that start with ``#``."""
import ast
import os.path as osp
import textwrap
from pathlib import Path
from typing import Set, Tuple

import pytest

import mmseg_elliptical

ROOT = Path(osp.dirname(mmseg_elliptical.__file__))
LIMIT = 0.25
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def doc_lines(text: str) -> Set[int]:
    """The 1-based lines of ``text`` that are docstring or comment lines."""
    marked = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, DOCUMENTED) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(
                    first.value, ast.Constant) and isinstance(
                        first.value.value, str):
                marked.update(range(first.lineno, first.end_lineno + 1))
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith('#'):
            marked.add(number)
    return marked


def docstring_share(root: Path) -> Tuple[int, int]:
    """Docstring and comment lines, and all lines, of the ``.py`` files
    under ``root``."""
    doc = total = 0
    for path in sorted(root.rglob('*.py')):
        text = path.read_text()
        doc += len(doc_lines(text))
        total += len(text.splitlines())
    return doc, total


def check_share(root: Path, limit: float = LIMIT) -> float:
    doc, total = docstring_share(root)
    share = doc / total
    assert share <= limit, (
        f'docstrings and comments are {doc}/{total} = {share:.1%} of '
        f'{root.name}\'s lines (at most {limit:.0%}): state arguments, '
        'returns and the one non-obvious reason; move the rest to docs/.')
    return share


def write_package(root: Path, body: str) -> Path:
    root.mkdir()
    (root / '__init__.py').write_text('')
    (root / 'mod.py').write_text(textwrap.dedent(body))
    return root


def test_the_package_is_at_most_a_quarter_docstrings_and_comments():
    check_share(ROOT)


def test_the_count_marks_docstring_spans_and_comment_lines():
    text = textwrap.dedent('''\
        """Module,
        two lines."""
        import os  # a trailing comment is code
        # a comment
        X = 'not a docstring'


        class A:
            """One line."""
            y = 1

            def f(self):
                    # indented comment
                return '# not a comment'

        async def g():
            """Async
            docstring
            """
            """A second string is code."""
        ''')
    assert sorted(doc_lines(text)) == [1, 2, 4, 9, 13, 17, 18, 19]


def test_a_heavy_package_fails_and_a_light_one_passes(tmp_path):
    heavy = write_package(
        tmp_path / 'heavy', '''\
        """A module docstring
        that says too much
        over three lines."""


        def f(x):
            # what the code says already
            return x
        ''')
    assert docstring_share(heavy) == (4, 8)
    with pytest.raises(AssertionError, match='50.0%'):
        check_share(heavy)
    light = write_package(
        tmp_path / 'light', '''\
        """What the module holds."""
        import math


        def f(x):
            return math.floor(x)
        ''')
    assert check_share(light) == pytest.approx(1 / 6)
