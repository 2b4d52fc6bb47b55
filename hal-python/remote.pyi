"""Type stubs of `hal.remote`: hal memory and notifies read, written and
signalled from other hosts over UCX (libucp.so.0, loaded when the first
Node is made), groups of processes across hosts, and channels with
subscribers on other hosts."""

from types import TracebackType
from typing import Any, final

from hal import Device, Memory, Notify

@final
class Group:
    """A membership of a group across hosts; `close()` (or the object's end) leaves it."""

    def __init__(
        self,
        addr: str,
        name: str,
        size: int,
        secret: str | None = None,
        timeout: float | None = 60.0,
        max_payload: int = 4096,
        listen: str | None = None,
    ) -> None:
        """Join the group `name` of `size` processes at `addr` ("IP:PORT", the
        same for every member; the process that binds it serves the group and
        is rank 0). `secret`: 32 hex digits (None: HAL_GROUP_SECRET)."""
    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def members(self) -> list[tuple[int, str]]:
        """Each member's process id and node address ("IP:PORT"), by rank."""
    def node(self) -> Node:
        """This member's node: export from it; its handles name it."""
    def all_gather(self, data: bytes) -> list[bytes]: ...
    def broadcast(self, root: int, data: bytes = b"") -> bytes: ...
    def barrier(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Group: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class Node:
    """This process on the network: exports to other hosts, connections to theirs."""

    def __init__(
        self,
        addr: str,
        advertise: str | None = None,
        timeout: float | None = None,
        spin: float | None = None,
    ) -> None:
        """Listen on `addr` ("IP:PORT"; port 0 takes a free one); `advertise`
        is the address the handles name when `addr` is every address
        ("0.0.0.0:PORT"); `timeout`: seconds per handshake and operation (None: 30);
        `spin`: seconds a waiting call drives the worker itself before it sleeps
        (None: 0, sleep at once; a ping-pong then wakes no thread)."""
    @property
    def address(self) -> str:
        """The address the handles name, "IP:PORT"."""
    @property
    def ucx(self) -> str:
        """Which UCX the node runs on: its version and library."""
    def export(self, memory: Memory, read_only: bool = False) -> RemoteExport: ...
    def export_notify(self, notify: Notify) -> RemoteExport: ...
    def connect(self, text: str) -> RemoteMemory: ...
    def connect_notify(self, text: str) -> RemoteNotify: ...
    def offer_channel(
        self,
        device: Device,
        name: str,
        secret: str | None = None,
        timeout: float | None = None,
    ) -> ChannelOffer:
        """Offer the channel `name` of this host to subscribers on other hosts;
        `secret`: 32 hex digits (None: a fresh one). Withdrawn with the offer."""
    def subscribe(self, device: Device, text: str, slots: int = 0) -> Subscriber:
        """Subscribe to the channel offer `text` names (another host's
        `ChannelOffer.text`); slots of its own on `device` (0: the channel's count)."""

@final
class ChannelOffer:
    """A channel offered to other hosts; withdrawn with this object (or `close()`)."""

    @property
    def text(self) -> str:
        """The handle text (hal1r. ...) for the other hosts; it holds the offer's secret."""
    @property
    def name(self) -> str: ...
    @property
    def subscribers(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> ChannelOffer: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class Subscriber:
    """A subscriber to a channel of another host (`Node.subscribe`)."""

    def receive(self, timeout: float | None = None) -> Sample | None:
        """The next sample in place (None when the timeout passed); it holds its
        slot, and the publisher's, until released. ClosedError once the channel ended."""
    @property
    def slots(self) -> int: ...
    @property
    def slot_size(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Subscriber: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class Sample:
    """A sample received from another host, in place: a read-only buffer."""

    @property
    def sequence(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def read(self, offset: int = 0, n: int | None = None) -> bytes: ...
    def release(self) -> None: ...
    def __enter__(self) -> Sample: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class RemoteExport:
    """Memory or a notify exported to other hosts; it ends with this object (or `close()`)."""

    @property
    def text(self) -> str:
        """The handle text (hal1r. ...) for the other host; it holds the export's secret."""
    @property
    def importers(self) -> int: ...
    def wait_importers(self, n: int, timeout: float | None = None) -> bool: ...
    def wait_unused(self, timeout: float | None = None) -> bool: ...
    def wait_signal(self, timeout: float | None = None) -> bool: ...
    def close(self) -> None: ...

@final
class RemoteMemory:
    """Another host's memory; `len(r)` is its size in bytes."""

    def __len__(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    def read(self, offset: int, size: int) -> bytes: ...
    def read_into(self, obj: Any, offset: int = 0) -> int:
        """Fill `obj` (a writable C-contiguous buffer, or a hal.Memory) from `offset`; the bytes read."""
    def write(self, offset: int, data: Any) -> None:
        """Write `data` (a C-contiguous buffer, or a hal.Memory) at `offset`; flush() to land it."""
    def write_signal(self, offset: int, data: Any) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...

@final
class RemoteNotify:
    """Another host's notify."""

    def signal(self) -> None: ...
