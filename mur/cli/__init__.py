"""The command line: typer commands, one module per command group; the only place that prints errors."""
