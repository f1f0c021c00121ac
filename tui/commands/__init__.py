"""One module per subcommand (train, attach, runs, plot, presets) and the dashboard runner they share."""
