"""Node postprocessors and payload formatting."""
