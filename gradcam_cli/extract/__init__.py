"""What a CAM needs from a network: activations and gradients recorded with hooks, masked forwards, guided backpropagation."""
