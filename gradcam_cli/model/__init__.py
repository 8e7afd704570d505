"""Building models: the hubs (timm, torchvision), checkpoints, labels, the device and the model's modes."""
