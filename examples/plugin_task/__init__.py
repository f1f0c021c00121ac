"""The plugin example's project folder (its package is plugin_task/ inside); a package only for import-linter."""
