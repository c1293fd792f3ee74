"""Where a deployment runs: an SSH host, a Docker engine, or this machine."""
