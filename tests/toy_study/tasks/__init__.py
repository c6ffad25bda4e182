"""The toy study's tasks, one module each."""
