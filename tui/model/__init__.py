"""What a viewer knows, without Textual: the dashboard model, metric history and its folding,
comparisons, run listings and number formatting."""
