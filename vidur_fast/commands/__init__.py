"""The command line: one module per command, each a thin layer over the stages below it.
`main.main` dispatches; `errors` is the one printer of user errors."""
