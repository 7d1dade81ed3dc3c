"""The grid: cells, the loop that runs them, the store and its per-image
areas, corrupted pipelines, the protocols."""
from .run import open_store, run_cells, run_grid, with_image_areas

__all__ = ['open_store', 'run_cells', 'run_grid', 'with_image_areas']
