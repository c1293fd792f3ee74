"""The Docker engine: one adapter around the docker SDK for `mur image`, `mur export` and Docker deploys.

    engine = DockerEngine.for_images()     # mur.engine.docker; or .for_deploy()
    engine.inspect("mur-hello:0.1.0")      # image operations (mur.engine.images): E-IMG-* on failure
    engine.container("mur-dep-...")        # container operations (mur.engine.containers): E-DEPLOY-010

mur.engine.sdk is the only module that imports the SDK; every call goes through its door, which
classifies a failure once and lets the operation's side choose the code. (The WebAssembly engine is
mur.wasm.engine, unrelated.)
"""
