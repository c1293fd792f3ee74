"""Artifacts end to end: `.mur.zip` build and read, stores, refs, `murmur.lock`, registry client/server.

    source dir --build--> .mur.zip --publish--> registry --install--> store (+ murmur.lock)

Modules (each owns one concern):

    package.py          reading a .mur.zip safely; the payload-shape rule build and run share
    build.py            `mur build`: plan the packed entry set, write a deterministic zip atomically
    lints.py            W-SEC-004 (literal secrets) and W-BLD-001..003 (authoring lints)
    store.py            the on-disk stores (~/.murmur/artifacts, <project>/.murmur/artifacts)
    lock.py             murmur.lock (lock_version 1): read, validate, verify, upsert, atomic write
    refs.py             install references: name@version, bare name, local .mur.zip path
    registry_client.py  local registry and the Nexus HTTP client (digest-verified downloads)
    registry_server.py  `mur registry serve`: the Nexus HTTP API over a disk store
    operations.py       publish / install / list, the commands' library side
    installed.py        installed artifacts: find one (digest-verified), check murmur.lock, unpack
    doctor.py           `mur doctor`: manifest artifacts against stores and lock
    search.py           `mur search`: local stores, a Nexus registry, or an artifacts-index.json
    skillbuild.py       `mur build --skill`: package a SKILL.md folder or zip, generating its manifest
"""
