"""The operator console (Textual)."""
