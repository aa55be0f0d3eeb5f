"""`glidein-ext dht`: run a site DHT node by hand, and put or get a key (for debugging)."""

from __future__ import annotations

import asyncio
import ipaddress
import signal

import click

from glidein_ext.dht.contact import Address, parse_address
from glidein_ext.dht.ids import parse_hex, to_hex
from glidein_ext.dht.keyfile import load_site_key
from glidein_ext.dht.node import DhtNode
from glidein_ext.errors import DhtError, UsageError

# Options more than one command takes, declared once.
NODE = click.option("--node", "node_addr", required=True, help="HOST:PORT of a node of the site.")
KEY_FILE = click.option("--key-file", required=True, help="File holding the per-site key.")


def _address(text: str) -> Address:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _client_bind_host(node: Address) -> str:
    """Loopback when the node is local, else every interface (the kernel picks the source)."""
    try:
        loopback = ipaddress.ip_address(node[0]).is_loopback
    except ValueError:
        loopback = node[0] == "localhost"
    return "127.0.0.1" if loopback else ""


@click.group()
def dht() -> None:
    """The site DHT (Delgado Peris 2014): run a node, put and get keys."""


@dht.command()
@click.option("--bind", "bind", default="127.0.0.1:0", show_default=True, help="HOST:PORT to bind.")
@click.option("--join", "joins", multiple=True, help="HOST:PORT of a site contact (repeatable).")
@KEY_FILE
@click.option("--id", "node_id", default=None, help="Node id as 40 hex digits (default: random).")
def node(bind: str, joins: tuple[str, ...], key_file: str, node_id: str | None) -> None:
    """Run a DHT node until SIGINT or SIGTERM, then leave gracefully."""
    host, port = _address(bind)
    contacts = [_address(j) for j in joins]
    key = load_site_key(key_file)
    ident: int | None = None
    if node_id is not None:
        try:
            ident = parse_hex(node_id)
        except ValueError as exc:
            raise UsageError(f"--id: {exc}") from exc
    asyncio.run(_run_node(key, host, port, contacts, ident))


async def _run_node(
    key: bytes, host: str, port: int, contacts: list[Address], ident: int | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    member = DhtNode(key, node_id=ident)
    try:
        bound = await member.start(host, port)
        click.echo(f"listening on {bound[0]}:{bound[1]} id {to_hex(member.id)}")
        if contacts:
            answered = await member.join(contacts)
            click.echo(f"joined through {answered} contact(s); {len(member.table)} known")
        await stop.wait()
        click.echo("leaving")
        await member.leave()
    finally:
        await member.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@dht.command()
@NODE
@KEY_FILE
@click.option("--ttl", type=float, default=None, help="Lifetime in seconds (default: 1 day).")
@click.argument("key")
@click.argument("value")
def put(node_addr: str, key_file: str, ttl: float | None, key: str, value: str) -> None:
    """Append VALUE to KEY's values."""
    where = _address(node_addr)
    site_key = load_site_key(key_file)
    if ttl is not None and ttl <= 0:
        raise UsageError("--ttl must be positive")
    stored = asyncio.run(_put(site_key, where, key, value.encode(), ttl))
    click.echo(f"stored on {stored} node(s)")


async def _put(site_key: bytes, where: Address, key: str, value: bytes, ttl: float | None) -> int:
    async with DhtNode(site_key, read_only=True) as client:
        await client.start(_client_bind_host(where), 0, maintenance=False)
        await client.join([where])
        return await client.put(key, value, ttl)


@dht.command()
@NODE
@KEY_FILE
@click.argument("key")
def get(node_addr: str, key_file: str, key: str) -> None:
    """Print KEY's values, one a line; exit 1 when there are none."""
    where = _address(node_addr)
    site_key = load_site_key(key_file)
    values = asyncio.run(_get(site_key, where, key))
    if not values:
        raise DhtError(f"no value stored under {key!r}")
    for data in values:
        click.echo(data.decode("utf-8", errors="backslashreplace"))


async def _get(site_key: bytes, where: Address, key: str) -> list[bytes]:
    async with DhtNode(site_key, read_only=True) as client:
        await client.start(_client_bind_host(where), 0, maintenance=False)
        await client.join([where])
        return await client.get(key)
