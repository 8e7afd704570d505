"""Maps from tensors: one runner per method kind, the methods themselves, augmented views. Tensors in, tensors out; no files."""
