"""What a run leaves behind: overlays and .npy maps written atomically, their names, the JSON records. Files, not models."""
