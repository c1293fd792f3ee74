"""Resolve: a parsed capsule manifest + the artifact stores -> a frozen ResolvedCapsule.

One step shared by `mur run` and `mur deploy` (and later image/export): the files the manifest
references, every declared artifact located (store artifacts digest-verified, local sources read
from disk) and the environment references, so the same missing artifact is the same error in every
command (E-RUN-008: a declared artifact is not installed locally).

    files.py      FileRef (a local file with its digest) and the walk/inside helpers
    artifacts.py  ResolvedArtifact and resolve_artifacts (store first, local sources from disk)
    capsule.py    ResolvedCapsule, resolve_loaded (run) and resolve_capsule (what ships)
    shipped.py    ShippedCapsule and ship(): what deploy, image and export package (files, artifacts,
                  env, floor, release source, the capsule digest)
    env.py        the one `.env` grammar (run, deploy, image, export; docs/run.md) and where a
                  command's env comes from (--env, --env-file, .env)
"""
