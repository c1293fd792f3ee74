"""mur deploy: the pinned runtime on real VMs (SSH), Docker containers and this machine.

Layout: ``plan`` (pure steps as data) -> ``service`` (orchestration) -> ``targets`` (ssh, docker,
local: how a step reaches the machine). ``bundle`` builds or fetches the pinned runtime,
``preflight`` checks a target before anything changes, ``supervisor`` keeps a service alive where
there is no systemd, ``systemd`` renders units, ``state`` keeps ``~/.murmur/deployments.json``.
"""
