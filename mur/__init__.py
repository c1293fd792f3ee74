"""mur: package AI-agent capsules, run them in isolation, deploy them to Linux VMs and containers."""

__version__ = "0.1.0"
