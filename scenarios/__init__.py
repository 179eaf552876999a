"""Scenario files, the CLI, reports and plots: the composition root."""
