"""The docker SDK: the one module of mur that imports it.

A `Connection` connects to the engine (DOCKER_HOST, else the local socket) once, and every SDK call
goes through its door (`call`, `find`, `each`), which classifies any failure once, as a `Fault`: the
engine has no such object (MISSING), no engine answered the connection (UNAVAILABLE), or the engine,
the transport or a registry behind it failed the operation (FAILED), with the SDK's own explanation.
The caller's side chooses what the user sees from that (`Codes`): E-IMG-* for image operations
(mur.engine.images), E-DEPLOY-010 for container operations (mur.engine.containers).
tests/engine/test_engine_errors.py checks that every operation turns every SDK error into a MurError.
"""

from __future__ import annotations

import enum
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Self, TypeVar

from mur.errors import MurError

T = TypeVar("T")


class Kind(enum.Enum):
    MISSING = "missing"  # the engine answered 404: no such image or container
    UNAVAILABLE = "unavailable"  # no engine answered the connection
    FAILED = "failed"  # the engine, the transport or a registry failed the operation


@dataclass(frozen=True)
class Fault:
    """One failed SDK call, classified."""

    kind: Kind
    what: str  # the operation, as the message names it: "tag x:1", "start container mur-dep"
    text: str  # the SDK's explanation (the engine's own words where it gave some)


Codes = Callable[[Fault], MurError]  # a side's choice of code, message and hint for a fault

CONNECT = "connect to the engine"


@functools.lru_cache(maxsize=1)
def sdk_errors() -> tuple[type[BaseException], ...]:
    """Everything an SDK call raises: the SDK's own classes (not all derive from DockerException, e.g.
    StreamParseError), requests' transport errors, OSError from the socket, and ValueError from a reply
    that is not the JSON it should be."""
    import docker.errors
    from requests.exceptions import RequestException

    own = tuple(c for c in vars(docker.errors).values() if isinstance(c, type) and issubclass(c, Exception))
    return (*own, RequestException, OSError, ValueError)


def explanation(exc: BaseException) -> str:
    """The engine's explanation of a failure, else the exception's text, else its class name."""
    try:
        text = str(getattr(exc, "explanation", None) or exc).strip()
    except Exception:  # noqa: BLE001 - an SDK exception whose message cannot be formatted
        text = ""
    return text or type(exc).__name__


def unreachable(exc: BaseException) -> str:
    """Why no engine answered, in plain words: where mur looked and the socket's own error (the SDK
    wraps it three deep: "Error while fetching server API version: ('Connection aborted.',
    FileNotFoundError(2, 'No such file or directory'))"), else the SDK's explanation."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return f"nothing answers at {where}: {e.strerror}"
        todo.extend(x for x in (*e.args, e.__cause__, e.__context__) if isinstance(x, BaseException))
    return f"{where}: {explanation(exc)}"


def classify(what: str, exc: BaseException) -> Fault:
    from docker.errors import NotFound  # ImageNotFound is one

    return Fault(Kind.MISSING if isinstance(exc, NotFound) else Kind.FAILED, what, explanation(exc))


class Connection:
    """One connection to a Docker engine, and the door every SDK call goes through."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def connect(cls, timeout: float, codes: Codes) -> Self:
        """Connect to the engine and check that it answers; `timeout` bounds each reply (seconds)."""
        try:
            import docker

            client = docker.from_env(timeout=timeout)
            client.ping()
        except sdk_errors() as exc:
            raise codes(Fault(Kind.UNAVAILABLE, CONNECT, unreachable(exc))) from exc
        return cls(client)

    def call(self, codes: Codes, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs), an SDK call; its failure becomes the MurError `codes` chooses."""
        return self._door(codes, what, False, fn, args, kwargs)

    def find(self, codes: Codes, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """`call`, but None when the engine has no such object."""
        return self._door(codes, what, True, fn, args, kwargs)

    def each(self, codes: Codes, what: str, chunks: Iterable[T]) -> Iterator[T]:
        """The items of an SDK stream (progress, logs, an image's bytes), its failures translated as a call's."""
        it = self.call(codes, what, iter, chunks)
        end = object()
        while (item := self.call(codes, what, next, it, end)) is not end:
            yield item

    def throwaway(self, codes: Codes, image: str, command: list[str], kwargs: dict[str, Any], timeout: float,
                  doing: tuple[str, str, str]) -> tuple[int, str]:
        """Run a container to completion and remove it: (exit status, combined output). `doing` names the
        start, the wait and the read of its output in a failure's message."""
        c = self.call(codes, f"create a container from {image}", self.client.containers.create, image,
                      command=command, **kwargs)
        try:
            self.call(codes, doing[0], c.start)
            status = self.call(codes, doing[1], c.wait, timeout=timeout).get("StatusCode", 1)
            out = self.call(codes, doing[2], c.logs, stdout=True, stderr=True)
            return int(status), out.decode("utf-8", "replace")
        finally:
            self.discard(c)

    def discard(self, container: Any) -> None:
        """Remove a throwaway container with its anonymous volumes (a capsule image declares /workdir a
        volume: without v=True every run left one behind); best effort."""
        try:
            container.remove(force=True, v=True)
        except sdk_errors():
            pass

    def _door(self, codes: Codes, what: str, missing_ok: bool, fn: Callable[..., T], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> T | None:
        try:
            return fn(*args, **kwargs)
        except MurError:
            raise
        except sdk_errors() as exc:
            fault = classify(what, exc)
            if missing_ok and fault.kind is Kind.MISSING:
                return None
            raise codes(fault) from exc
