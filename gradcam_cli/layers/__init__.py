"""Target layers: dotted paths resolved on a model, the default per family, the module tree."""
