"""Trust inside a distributed site, with real pilot processes, a real Task Queue and real UDP
(beyond Delgado Peris 2014, whose pilots all hold the one site key): a pilot of the site cannot
speak for another to the master (forged, replayed or cross-pilot ``done``, ``bye``, ``hello``
change no task's state), and pilots whose credential is revoked leave (the master at its next
call, a worker when the master tells it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec as messages
from glidein_ext.errors import DhtError
from glidein_ext.testbed.tq_server import TqServer, tq_env
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import Completion, Registration

SITE = "T2_XX_Test"
LONG = {"command": "sleep 300"}  # tasks that run for the whole test


class _Pilots:
    """``pilot run`` processes this test owns (killed at the end)."""

    def __init__(self, server: TqServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, token_file: Path | None = None) -> None:
        """A pilot process: the shared token, or the credential in ``token_file``."""
        auth = ("--token-file", str(token_file)) if token_file else ()
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (closed below)
        command = [
            *(sys.executable, "-m", "glidein_ext", "pilot", "run", "--tq", self.server.url),
            *("--site", SITE, "--workdir", str(self.directory / name), *auth),
            *("--round-period", "0.5", "--round-window", "0.05", "--retry-for", "10", *args),
        ]
        (self.directory / name).mkdir()
        self.procs[name] = subprocess.Popen(  # its own group: its tasks die with it
            command,
            env=tq_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):  # the pilot and the tasks it left
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@contextlib.contextmanager
def _pilots(server: TqServer, directory: Path) -> Iterator[_Pilots]:
    directory.mkdir()
    pilots = _Pilots(server, directory)
    try:
        yield pilots
    finally:
        pilots.stop()


def _busy(server: TqServer, count: int) -> Callable[[], bool]:
    return lambda: server.operator().status().pilots.get(SITE, {}).get("busy", 0) == count


def _tasks(server: TqServer) -> dict[str, int]:
    (workflow,) = server.operator().status().workflows
    return {state: n for state, n in workflow.tasks.items() if n}


def test_revoked_pilots_of_a_distributed_site_leave(
    tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    with TqServer(
        tmp_path / "tq", args=["--architecture", "distributed", "--master-timeout", "6"]
    ) as server:
        operator = server.operator()
        issued = operator.mint_credentials(SITE, count=3)
        files = []
        for item in issued:
            path = tmp_path / f"credential-{item.id}"
            path.write_text(item.secret)
            path.chmod(0o600)
            files.append(path)
        operator.submit({"tasks": [{"name": f"t{i}", **LONG} for i in range(2)]})
        with _pilots(server, tmp_path / "pilots") as pilots:
            pilots.start("master", token_file=files[0])
            wait_until(lambda: server.operator().status().pilots.get(SITE), 180, "the master")
            pilots.start("w1", token_file=files[1])
            pilots.start("w2", token_file=files[2])
            wait_until(_busy(server, 2), 180, "both workers busy")
            # A worker's credential: the Task Queue ends it, the master tells it to leave.
            ended = operator.revoke_credential(issued[1].id)
            assert len(ended) == 1
            wait_until(
                lambda: pilots.procs["w1"].poll() is not None, 60, "the revoked worker's exit"
            )
            assert "stopping" in pilots.log("w1")
            assert pilots.procs["w2"].poll() is None and pilots.procs["master"].poll() is None
            # The master's own credential: refused at its next call, it leaves.
            operator.revoke_credential(issued[0].id)
            wait_until(
                lambda: pilots.procs["master"].poll() is not None, 180, "the revoked master's exit"
            )
            warnings = pilots.log("master").count("WARNING")
            assert warnings < 10, pilots.log("master")[-3000:]
            assert pilots.procs["w2"].poll() is None  # untouched: still runs its task
            assert _tasks(server) == {"queued": 1, "running": 1}


async def _rogue(key: bytes, dht_id: str, master: tuple[str, int], forged: list[Any]) -> list[Any]:
    """A pilot of the site (it holds the site key) sends the master each (kind, payload)."""
    node = DhtNode(key, node_id=int(dht_id, 16))
    await node.start()
    answers = []
    try:
        for kind, payload in forged:
            try:
                answers.append(await node.message(master, kind, payload, timeout=2.0))
            except DhtError as exc:
                answers.append(str(exc))
    finally:
        await node.close()
    return answers


def test_a_pilot_cannot_speak_for_the_others_to_its_master(
    tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    with TqServer(tmp_path / "tq", args=["--architecture", "distributed"]) as server:
        server.operator().submit({"tasks": [{"name": f"t{i}", **LONG} for i in range(2)]})
        with _pilots(server, tmp_path / "pilots") as pilots:
            pilots.start("site", "--pilots", "3")
            wait_until(_busy(server, 2), 180, "two busy pilots")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.bind(("127.0.0.1", 0))
                address = f"127.0.0.1:{sock.getsockname()[1]}"
            rogue = server.pilot().register(
                Registration(site=SITE, host="rogue", dht_address=address)
            )
            assert rogue.site_key and rogue.dht_id and rogue.master and rogue.pilot_key
            host, _, port = rogue.master.dht_address.rpartition(":")
            master = (host, int(port))
            epoch = rogue.master.epoch
            mine = pilotkeys.epoch_key(bytes.fromhex(rogue.pilot_key), epoch)
            forged: list[Any] = []

            def sealed(kind: str, pilot: int, body: Any) -> tuple[str, Any]:
                return kind, messages.seal(mine, kind, pilot, epoch, body, time.time())

            for victim in (2, 3):  # pilot 1 is the master; 2 and 3 run tasks 1 and 2
                for task in (1, 2):
                    done = messages.encode(messages.Done(victim, Completion(task, 1, 0)))
                    forged.append((messages.DONE, done))  # the old, unsealed form
                    forged.append(sealed(messages.DONE, victim, done))  # with its own key
                    as_me = sealed(messages.DONE, rogue.pilot_id, done)
                    forged += [as_me, as_me]  # sealed as itself, naming another; and replayed
                forged.append((messages.BYE, [victim]))
                forged.append(sealed(messages.BYE, victim, [victim]))
                hello = messages.encode(messages.Hello(victim, ("127.0.0.1", 9)))
                forged.append((messages.HELLO, hello))
                forged.append(sealed(messages.HELLO, victim, hello))
            site_key = bytes.fromhex(rogue.site_key)
            answers = asyncio.run(_rogue(site_key, rogue.dht_id, master, forged))
            assert all(a in (None, messages.PENDING) for a in answers), answers
            time.sleep(3)  # several rounds (0.5 s) and their Task Queue calls
            assert _tasks(server) == {"running": 2}
            assert _busy(server, 2)()
            assert pilots.procs["site"].poll() is None
