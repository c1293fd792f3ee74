"""The pinned mur runtime that runs capsules on targets and in images, and what it loads fast.

    bundle.py       the runtime as one self-extracting file per version and platform: built from
                    this installation, fetched from a release source, verified by sha256
    precompile.py   components cross-compiled for a target platform's engine cache

Shared by mur.deploy (uploads them to hosts) and mur.image (puts them into image layers); it imports
neither.
"""
