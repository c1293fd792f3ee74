"""mur deploy: a capsule as a supervised, long-lived service on this machine, an SSH host or Docker.

Progress goes to an injected mur.progress.Reporter (library code never prints); the pinned runtime
and precompiled components come from mur.runtime.

Data flows one way: manifest -> resolve (mur.resolve; what ships: mur.resolve.shipped) ->
provider -> plan -> apply -> target.

    operations.py        one function per `mur deploy` command; picks the provider
    request.py           DeployRequest: what the user asked for
    providers/base.py    the Provider protocol, Context (injected reporter, store, connect), shared pieces
    providers/host.py    SSH hosts and this machine (release directories, an init system)
    providers/docker.py  the Docker engine (a capsule image, one container per deployment)
    preflight.py         what a target can enforce, measured there before anything changes
    plan.py              release plan, digests, ports, destroy: pure steps
    steps.py             value types (leaf): steps, Layout, ServiceConfig, ServiceState
    init/                systemd and the mur supervisor as command builders
    apply.py             runs steps through a Target (the only place that touches a host)
    targets/             the seam: ssh.py, local.py, docker.py (engine adapter), recording.py (tests)
    state.py             typed Deployment records in ~/.murmur/deployments.json, atomic + locked
    auth.py              the per-deployment A2A token and TLS certificate
    health.py            agent card + token check (stdlib only: also runs on the target)
    supervisor.py        `mur supervise run|smoke`: the on-target supervisor process
    procid.py            process identity (pid + start time + boot id) for pid files
    env.py               the env file on the target (its values: mur.resolve.env)
    hostprobe.py         `mur probe --json`: what this host can enforce
"""
