"""Verdicts: summaries, SEA's worst case, bootstraps, arms and the audit,
computed from a store's cells once."""
