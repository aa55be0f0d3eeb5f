"""A contact: the (id, address) triple Kademlia nodes exchange (Kademlia paper, section 2.2)."""

from __future__ import annotations

from dataclasses import dataclass

from glidein_ext.dht.ids import to_hex

Address = tuple[str, int]


@dataclass(frozen=True)
class Contact:
    """A peer: its 160-bit id and the UDP address it answers on."""

    __slots__ = ("host", "id", "port")

    id: int
    host: str
    port: int

    @property
    def address(self) -> Address:
        return (self.host, self.port)

    def __str__(self) -> str:
        return f"{to_hex(self.id)[:8]}@{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) to a tuple; raises ValueError when malformed."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return (host, port)
