"""Reaching a deployment from the operator's machine: its A2A endpoint (reach.py), its sessions'
traces (sessions.py, read-only) and the per-task lines `mur deploy logs` adds (tasklog.py).

An SSH deployment is reached over a new SSH connection to its recorded target, the host key
verified against the recorded known_hosts exactly as deploy verified it (mur.deploy.targets.connect):
no `ssh` process, nothing left listening or running when the command returns.
"""
