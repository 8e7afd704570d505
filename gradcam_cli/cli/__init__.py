"""The `gradcam` command: options and presets, stop requests, terminal and JSON output, the error funnel."""
