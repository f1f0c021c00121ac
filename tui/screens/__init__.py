"""Dashboard screens: the main dashboard and the abort, quit, tune and help modals."""
