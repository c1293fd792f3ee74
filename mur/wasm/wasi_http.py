"""`wasi:http@0.2.x` for guests built against upstream's WIT, held to capabilities.network.allow.

Upstream's drivers (and any component built with wasi-http bindings) import
``wasi:http/outgoing-handler`` and ``wasi:http/types``. wasmtime-py can link wasmtime's own
implementation (``Linker.add_wasi_http``), but it has no per-request hook: every request would go
out wherever the guest pointed it. So mur links wasmtime's implementation and *shadows* the one
function that sends, ``outgoing-handler.handle``, with a host import of its own:

1. the guest builds its request with wasmtime's ``wasi:http/types`` as usual;
2. its ``handle(request, options)`` lands in :func:`handle` (Python), which reads the request's
   scheme, authority and path through a tiny helper component (:data:`HELPER_WAT`, instantiated
   in the guest's own Store on first use, linked to wasmtime's real wasi:http);
3. a URL outside the guest's effective allow list (the same check as ``murmur:http/outbound``,
   mur.manifest.network.url_allowed, which never resolves DNS) is refused with the WASI error
   ``HTTP-request-denied``, exactly what upstream returns, and reported to the trace as
   ``network_denied``; nothing is sent;
4. an allowed request goes to wasmtime's real ``handle`` through the helper, with its timeouts
   capped by what is left of the guest's deadline (a guest blocked on a response is in host code,
   where no epoch deadline can stop it).

Python cannot call wasmtime's host functions directly, and a component cannot re-export an
imported function, so the helper lowers each one it needs and lifts it again. Resources are
Store-wide, so the guest's request handle passes through Python into the helper unchanged.

Redirects are never followed by wasmtime's client (a 3xx reaches the guest, whose next request is
checked again); proxies are not used. Deliberately absent: ``wasi:http/incoming-handler`` (a guest
serves nothing).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

# The outgoing-handler version wasmtime 50 defines: shadowing needs the exact name. Guests built
# against any wasi:http@0.2.x resolve to it (wasmtime matches semver-compatible imports).
HANDLER = "wasi:http/outgoing-handler@0.2.12"
DENIED = "HTTP-request-denied"
# Cap for a timeout the guest left unset or set larger: no request outlives the guest's deadline.
NANOS = 1_000_000_000

_ERROR_CODE = """
    (variant
      (case "DNS-timeout") (case "DNS-error" $dns) (case "destination-not-found") (case "destination-unavailable")
      (case "destination-IP-prohibited") (case "destination-IP-unroutable") (case "connection-refused")
      (case "connection-terminated") (case "connection-timeout") (case "connection-read-timeout")
      (case "connection-write-timeout") (case "connection-limit-reached") (case "TLS-protocol-error")
      (case "TLS-certificate-error") (case "TLS-alert-received" $tls) (case "HTTP-request-denied")
      (case "HTTP-request-length-required") (case "HTTP-request-body-size" (option u64))
      (case "HTTP-request-method-invalid") (case "HTTP-request-URI-invalid") (case "HTTP-request-URI-too-long")
      (case "HTTP-request-header-section-size" (option u32)) (case "HTTP-request-header-size" (option $fs))
      (case "HTTP-request-trailer-section-size" (option u32)) (case "HTTP-request-trailer-size" $fs)
      (case "HTTP-response-incomplete") (case "HTTP-response-header-section-size" (option u32))
      (case "HTTP-response-header-size" $fs) (case "HTTP-response-body-size" (option u64))
      (case "HTTP-response-trailer-section-size" (option u32)) (case "HTTP-response-trailer-size" $fs)
      (case "HTTP-response-transfer-coding" (option string)) (case "HTTP-response-content-coding" (option string))
      (case "HTTP-response-timeout") (case "HTTP-upgrade-failed") (case "HTTP-protocol-error") (case "loop-detected")
      (case "configuration-error") (case "internal-error" (option string)))"""

# Exports: scheme/authority/path-with-query of a borrowed request, a fresh request-options, its
# three timeouts (get; set all three at once) and the real handle(). Each core function resets the
# bump allocator (results are lifted before the next call), lowers the import into memory at 16
# and, for a borrowed handle, drops the borrow before returning (the canonical ABI requires it).
HELPER_WAT = """
(component
  (import "wasi:http/types@0.2.0" (instance $types
    (export "outgoing-request" (type $req (sub resource)))
    (export "request-options" (type $opts (sub resource)))
    (export "future-incoming-response" (type $fut (sub resource)))
    (type $scheme' (variant (case "HTTP") (case "HTTPS") (case "other" string)))
    (export "scheme" (type $scheme (eq $scheme')))
    (type $dns' (record (field "rcode" (option string)) (field "info-code" (option u16))))
    (export "DNS-error-payload" (type $dns (eq $dns')))
    (type $tls' (record (field "alert-id" (option u8)) (field "alert-message" (option string))))
    (export "TLS-alert-received-payload" (type $tls (eq $tls')))
    (type $fs' (record (field "field-name" (option string)) (field "field-size" (option u32))))
    (export "field-size-payload" (type $fs (eq $fs')))
    (type $ec' @ERROR_CODE@)
    (export "error-code" (type $ec (eq $ec')))
    (export "[method]outgoing-request.scheme" (func (param "self" (borrow $req)) (result (option $scheme))))
    (export "[method]outgoing-request.authority" (func (param "self" (borrow $req)) (result (option string))))
    (export "[method]outgoing-request.path-with-query" (func (param "self" (borrow $req)) (result (option string))))
    (export "[constructor]request-options" (func (result (own $opts))))
    (export "[method]request-options.connect-timeout" (func (param "self" (borrow $opts)) (result (option u64))))
    (export "[method]request-options.first-byte-timeout" (func (param "self" (borrow $opts)) (result (option u64))))
    (export "[method]request-options.between-bytes-timeout" (func (param "self" (borrow $opts)) (result (option u64))))
    (export "[method]request-options.set-connect-timeout" (func (param "self" (borrow $opts)) (param "duration" (option u64)) (result (result))))
    (export "[method]request-options.set-first-byte-timeout" (func (param "self" (borrow $opts)) (param "duration" (option u64)) (result (result))))
    (export "[method]request-options.set-between-bytes-timeout" (func (param "self" (borrow $opts)) (param "duration" (option u64)) (result (result))))
  ))
  (alias export $types "outgoing-request" (type $req))
  (alias export $types "request-options" (type $opts))
  (alias export $types "future-incoming-response" (type $fut))
  (alias export $types "scheme" (type $scheme))
  (alias export $types "error-code" (type $ec))
  (import "wasi:http/outgoing-handler@0.2.0" (instance $handler
    (export "outgoing-request" (type $r (eq $req)))
    (export "request-options" (type $o (eq $opts)))
    (export "future-incoming-response" (type $f (eq $fut)))
    (export "error-code" (type $e (eq $ec)))
    (export "handle" (func (param "request" (own $r)) (param "options" (option (own $o)))
                           (result (result (own $f) (error $e)))))
  ))
  (core module $mem
    (memory (export "mem") 1)
    (global $bump (export "bump") (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get 2))))
      (global.set $bump (i32.add (local.get $p) (local.get 3)))
      (if (i32.gt_u (global.get $bump) (i32.shl (memory.size) (i32.const 16)))
        (then (if (i32.eq (memory.grow (i32.add (i32.shr_u (local.get 3) (i32.const 16)) (i32.const 1)))
                          (i32.const -1))
          (then unreachable))))
      (local.get $p)))
  (core instance $mi (instantiate $mem))
  (alias core export $mi "mem" (core memory $memory))
  (alias core export $mi "realloc" (core func $realloc))
  (core func $scheme_l (canon lower (func $types "[method]outgoing-request.scheme") (memory $memory) (realloc $realloc)))
  (core func $auth_l (canon lower (func $types "[method]outgoing-request.authority") (memory $memory) (realloc $realloc)))
  (core func $path_l (canon lower (func $types "[method]outgoing-request.path-with-query") (memory $memory) (realloc $realloc)))
  (core func $opts_l (canon lower (func $types "[constructor]request-options")))
  (core func $gc_l (canon lower (func $types "[method]request-options.connect-timeout") (memory $memory)))
  (core func $gf_l (canon lower (func $types "[method]request-options.first-byte-timeout") (memory $memory)))
  (core func $gb_l (canon lower (func $types "[method]request-options.between-bytes-timeout") (memory $memory)))
  (core func $sc_l (canon lower (func $types "[method]request-options.set-connect-timeout")))
  (core func $sf_l (canon lower (func $types "[method]request-options.set-first-byte-timeout")))
  (core func $sb_l (canon lower (func $types "[method]request-options.set-between-bytes-timeout")))
  (core func $handle_l (canon lower (func $handler "handle") (memory $memory) (realloc $realloc)))
  (core func $drop_req (canon resource.drop $req))
  (core func $drop_opts (canon resource.drop $opts))
  (core module $main
    (import "m" "bump" (global $bump (mut i32)))
    (import "h" "scheme" (func $scheme (param i32 i32)))
    (import "h" "auth" (func $auth (param i32 i32)))
    (import "h" "path" (func $path (param i32 i32)))
    (import "h" "opts" (func $opts (result i32)))
    (import "h" "gc" (func $gc (param i32 i32)))
    (import "h" "gf" (func $gf (param i32 i32)))
    (import "h" "gb" (func $gb (param i32 i32)))
    (import "h" "sc" (func $sc (param i32 i32 i64) (result i32)))
    (import "h" "sf" (func $sf (param i32 i32 i64) (result i32)))
    (import "h" "sb" (func $sb (param i32 i32 i64) (result i32)))
    (import "h" "handle" (func $handle (param i32 i32 i32 i32)))
    (import "h" "drop-req" (func $drop_req (param i32)))
    (import "h" "drop-opts" (func $drop_opts (param i32)))
    (func (export "scheme") (param i32) (result i32)
      (global.set $bump (i32.const 1024)) (call $scheme (local.get 0) (i32.const 16))
      (call $drop_req (local.get 0)) (i32.const 16))
    (func (export "auth") (param i32) (result i32)
      (global.set $bump (i32.const 1024)) (call $auth (local.get 0) (i32.const 16))
      (call $drop_req (local.get 0)) (i32.const 16))
    (func (export "path") (param i32) (result i32)
      (global.set $bump (i32.const 1024)) (call $path (local.get 0) (i32.const 16))
      (call $drop_req (local.get 0)) (i32.const 16))
    (func (export "opts") (result i32) (call $opts))
    (func (export "gc") (param i32) (result i32)
      (call $gc (local.get 0) (i32.const 16)) (call $drop_opts (local.get 0)) (i32.const 16))
    (func (export "gf") (param i32) (result i32)
      (call $gf (local.get 0) (i32.const 16)) (call $drop_opts (local.get 0)) (i32.const 16))
    (func (export "gb") (param i32) (result i32)
      (call $gb (local.get 0) (i32.const 16)) (call $drop_opts (local.get 0)) (i32.const 16))
    (func (export "set") (param $o i32) (param $c i64) (param $f i64) (param $b i64)
      (drop (call $sc (local.get $o) (i32.const 1) (local.get $c)))
      (drop (call $sf (local.get $o) (i32.const 1) (local.get $f)))
      (drop (call $sb (local.get $o) (i32.const 1) (local.get $b)))
      (call $drop_opts (local.get $o)))
    (func (export "handle") (param i32 i32 i32) (result i32)
      (global.set $bump (i32.const 1024))
      (call $handle (local.get 0) (local.get 1) (local.get 2) (i32.const 16)) (i32.const 16)))
  (core instance $i (instantiate $main
    (with "m" (instance $mi))
    (with "h" (instance
      (export "scheme" (func $scheme_l)) (export "auth" (func $auth_l)) (export "path" (func $path_l))
      (export "opts" (func $opts_l)) (export "gc" (func $gc_l)) (export "gf" (func $gf_l)) (export "gb" (func $gb_l))
      (export "sc" (func $sc_l)) (export "sf" (func $sf_l)) (export "sb" (func $sb_l))
      (export "handle" (func $handle_l)) (export "drop-req" (func $drop_req)) (export "drop-opts" (func $drop_opts))))))
  (func (export "scheme") (param "r" (borrow $req)) (result (option $scheme))
    (canon lift (core func $i "scheme") (memory $memory) (realloc $realloc)))
  (func (export "authority") (param "r" (borrow $req)) (result (option string))
    (canon lift (core func $i "auth") (memory $memory) (realloc $realloc)))
  (func (export "path-with-query") (param "r" (borrow $req)) (result (option string))
    (canon lift (core func $i "path") (memory $memory) (realloc $realloc)))
  (func (export "new-options") (result (own $opts)) (canon lift (core func $i "opts")))
  (func (export "connect-timeout") (param "o" (borrow $opts)) (result (option u64))
    (canon lift (core func $i "gc") (memory $memory)))
  (func (export "first-byte-timeout") (param "o" (borrow $opts)) (result (option u64))
    (canon lift (core func $i "gf") (memory $memory)))
  (func (export "between-bytes-timeout") (param "o" (borrow $opts)) (result (option u64))
    (canon lift (core func $i "gb") (memory $memory)))
  (func (export "set-timeouts") (param "o" (borrow $opts)) (param "connect" u64) (param "first-byte" u64)
                                (param "between-bytes" u64)
    (canon lift (core func $i "set")))
  (func (export "handle") (param "request" (own $req)) (param "options" (option (own $opts)))
                          (result (result (own $fut) (error $ec)))
    (canon lift (core func $i "handle") (memory $memory) (realloc $realloc)))
)
""".replace("@ERROR_CODE@", _ERROR_CODE)

_HELPERS: "weakref.WeakKeyDictionary[Any, tuple[Any, Any]]" = weakref.WeakKeyDictionary()
_HELPERS_LOCK = threading.Lock()


def add_to_linker(linker: Any) -> None:
    """wasmtime's wasi:http on `linker` (after add_wasip2), with `handle` shadowed by :func:`handle`."""
    from mur.wasm.interrupt import host_import

    linker.add_wasi_http()
    linker.allow_shadowing = True
    with linker.root() as root:
        with root.add_instance(HANDLER) as inst:
            inst.add_func("handle", host_import(handle))
    linker.allow_shadowing = False


def _helper(engine: Any) -> tuple[Any, Any]:
    """(compiled helper component, its linker: WASI p2 + wasmtime's unshadowed wasi:http) per engine."""
    from wasmtime.component import Component, Linker

    with _HELPERS_LOCK:
        found = _HELPERS.get(engine)
        if found is None:
            linker = Linker(engine)
            linker.add_wasip2()
            linker.add_wasi_http()
            found = _HELPERS[engine] = (Component(engine, HELPER_WAT), linker)
        return found


class _Helper:
    """The helper instance in one guest's Store: its exported functions by name."""

    def __init__(self, store: Any, engine: Any):
        component, linker = _helper(engine)
        self.instance = linker.instantiate(store, component)

    def __call__(self, store: Any, name: str, *args: Any) -> Any:
        return self.instance.get_func(store, name)(store, *args)


def request_url(store: Any, helper: _Helper, request: Any) -> str | None:
    """`scheme://authority/path` of an outgoing-request, or None when it names no http(s) target."""
    scheme = helper(store, "scheme", request)
    authority = helper(store, "authority", request)
    path = helper(store, "path-with-query", request) or "/"
    tag = getattr(scheme, "tag", None)
    name = {"HTTP": "http", "HTTPS": "https"}.get(tag or "HTTPS") if scheme is not None else "https"
    if name is None or not authority:
        return None
    return f"{name}://{authority}{path if path.startswith('/') else '/' + path}"


def _capped(store: Any, helper: _Helper, options: Any, deadline_at: float | None) -> Any:
    """Request options whose timeouts end before the guest's deadline, with time left for it to act on
    the failure (mur.wasm.http.time_left; a new resource when the guest passed none)."""
    from mur.wasm.http import time_left

    left = time_left(deadline_at)
    if left is None:
        return options
    cap = int(left * NANOS)
    if options is None:
        options = helper(store, "new-options")
        wanted = (None, None, None)
    else:
        wanted = tuple(helper(store, f, options) for f in ("connect-timeout", "first-byte-timeout",
                                                          "between-bytes-timeout"))
    helper(store, "set-timeouts", options, *(min(w, cap) if w else cap for w in wanted))
    return options


def handle(store: Any, request: Any, options: Any) -> Any:
    """The guest's `outgoing-handler.handle`: checked against its allow list, then sent by wasmtime."""
    from wasmtime.component import Variant

    from mur.manifest.network import url_allowed
    from mur.wasm.http import _redact
    from mur.wasm.callcontext import call_context

    ctx = call_context(store)
    helper = ctx.wasi_http
    if helper is None:
        helper = ctx.wasi_http = _Helper(store, ctx.engine)
    url = request_url(store, helper, request)
    shown = _redact(url) if url else "(no http(s) scheme or authority)"
    if url is None or not url_allowed(ctx.http.allow, url):
        ctx.http.report({"url": shown, "method": None, "allowed": False,
                         "error": f"network policy: '{shown}' not in capabilities.network.allow"})
        request.drop(store)
        if options is not None:
            options.drop(store)
        return Variant(DENIED)
    ctx.http.report({"url": shown, "method": None, "allowed": True})
    return helper(store, "handle", request, _capped(store, helper, options, ctx.http.deadline_at))
