"""The `lamina` command."""
