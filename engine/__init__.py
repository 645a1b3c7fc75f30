"""The scheduling engine: pure, deterministic, no I/O outside backends; never imports the console."""
