"""Imported first by the package: mmengine 0.10 and mmseg 1.2 import
setuptools' ``pkg_resources``, which warns at each import that it is
deprecated (four lines at every start of a tool that no user can act on;
setuptools is pinned below 81, where it still exists). Only that warning is
silenced."""
import warnings

warnings.filterwarnings(
    'ignore', message='pkg_resources is deprecated', category=UserWarning)
