"""The engine of `gradcam explain`: a stream of sources through decode threads, batched CAM passes and write threads."""
