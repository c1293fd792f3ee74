"""WebAssembly components: the wasmtime engine and compile cache, the host and its imports, limits.

See docs/wasm.md. Heavy imports (wasmtime) happen inside functions, so importing this package is cheap.
"""
