"""Evidence: what the layers compute (collapse, attention maps, tokens)."""
