"""The front: a small HTTP proxy mur owns, holding a deployment's stable address across releases.

A deployment's URL points at the front; each release's `mur run` listens on a private loopback port
behind it. A new release starts beside the old one, and the front moves new requests to it only
once it answers (a broken release never takes the address); the old one drains: requests already
sent to it finish, tasks it accepted keep being answered (`tasks/get`, `tasks/cancel`, replies to
its input requests go to it), and once it is stopped the front still answers `tasks/get` for its
finished tasks from a bounded cache. No connection to the stable address is ever refused: the
listening socket stays open for the front's whole life, and a new front takes it over from the old
one (SCM_RIGHTS) when the front itself is upgraded.

    config.py   what the front is told (listen address, backends and their roles) and what it reports
    http.py     HTTP/1.1 framing: request and response heads, bodies, chunked relays
    proxy.py    the server: accept, route, forward, relay, learn which backend owns which task
    drain.py    draining backends: follow their open tasks to the end, keep the results
    handoff.py  passing the listening socket from one front process to the next
    control.py  the operator's side: the shell commands that reconfigure a front and wait for it

`mur front run --config FILE` (mur/cli/front.py, hidden) is the process; docs/deploy.md ("Fleets")
says why a proxy and not SO_REUSEPORT.
"""
