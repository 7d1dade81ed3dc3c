"""Robustness: one folder per threat (attacks, corruption, certification,
audit), each with its cells, code, verdicts and report, over the shared
grid, statistics and seeds (docs/install.md). Nothing is imported here: a
tool reads the cells (pure Python) before torch."""
