"""Maps while a model trains: the same explanations, sent to the trackers training code already has.

`snapshot` explains a fixed set of images with the model as it is and leaves the model and the random state as found;
`tensorboard.log_cams` logs them from any loop; `lightning.CamCallback` from a Lightning Trainer (the `lightning`
extra, imported only by that module, never by `import gradcam_cli`); `transformers.CamCallback` from a Hugging Face
Trainer (transformers imported only there). `sinks` is where both callbacks send the maps (wandb imported only there
and in `transformers`, when a W&B sink is used; MLflow through the client the caller has). `grid_shown` draws one
grid per image when several methods or layers are asked; `val_images` takes `images=N` from the validation loader;
`shown` holds the `Shown` record they all pass along.
"""
