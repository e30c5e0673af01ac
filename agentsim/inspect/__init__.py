"""inspect."""
