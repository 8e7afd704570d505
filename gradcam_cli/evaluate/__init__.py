"""Trust: how faithful a map is to the model, measured, with baselines beside the methods."""
