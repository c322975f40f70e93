"""`python -m vidur_fast` is the `vidur-fast` command."""

from vidur_fast.commands.main import run

run()
