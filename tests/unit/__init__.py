"""Unit tests, one folder per stage of the package."""
