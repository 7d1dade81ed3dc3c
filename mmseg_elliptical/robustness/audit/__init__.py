"""The gradient-masking audit of an attack grid: its extra cells, its
checks and verdict, and its table."""
