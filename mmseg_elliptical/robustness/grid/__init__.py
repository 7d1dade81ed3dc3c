"""The grid of every threat: the loop, the run over models, the resumable
store and its per-image areas, each model's cells."""
