"""Helpers shared by several test folders: engine harnesses, small runs, CLI flag sets."""
