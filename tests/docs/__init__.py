"""The documentation checked against the tool."""
