"""`tq credential mint|list|revoke`: per-pilot credentials, each bound to a site, minted and
revoked by the operator."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import click

from glidein_ext.cli.tq.options import ca_option, operator_client, token_option, url_option
from glidein_ext.errors import UsageError


@click.group()
def credential() -> None:
    """Per-pilot credentials: mint (bound to a site), list, revoke."""


@credential.command()
@click.option("--site", required=True, help="The site its pilots may register at.")
@click.option("--count", type=click.IntRange(1, 10_000), default=1, show_default=True)
@click.option("--ttl", default=None, help="Valid for this long (24h, 7d, seconds); default: ever.")
@click.option("--note", default="", help="A note for `tq credential list`.")
@click.option(
    "--output-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Write each secret to DIR/tq-credential-<id> (0600; DIR made 0700) instead of stdout.",
)
@url_option
@token_option
@ca_option
def mint(
    site: str,
    count: int,
    ttl: str | None,
    note: str,
    output_dir: str | None,
    url: str | None,
    token: str | None,
    ca_file: str | None,
) -> None:
    """Mint credentials for pilots of SITE: `ID SECRET` lines (the secrets are shown once).

    Hand a secret to its pilots in a private file (`pilot run --token-file`), never in a job's
    environment or arguments."""
    from glidein_ext.timefmt import parse_duration

    seconds = parse_duration(ttl) if ttl is not None else None
    directory = _private_dir(Path(output_dir)) if output_dir else None
    issued = operator_client(url, token, ca_file).mint_credentials(site, count, seconds, note)
    for item in issued:
        if directory is None:
            click.echo(f"{item.id} {item.secret}")
            continue
        path = directory / f"tq-credential-{item.id}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(item.secret + "\n")
        click.echo(f"{item.id} {path}")


def _private_dir(directory: Path) -> Path:
    """``directory``, made 0700 if new; refused if group or others may enter it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o077:
        raise UsageError(f"{directory} is open to group or others (mode {mode:04o}): chmod 700 it")
    return directory


@credential.command(name="list")
@url_option
@token_option
@ca_option
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def list_credentials(
    url: str | None, token: str | None, ca_file: str | None, as_json: bool
) -> None:
    """Every credential (never a secret): site, state, expiry, batch job, pilots registered."""
    from glidein_ext.timefmt import format_relative

    found = operator_client(url, token, ca_file).credentials()
    if as_json:
        click.echo(json.dumps([item.to_json() for item in found], indent=2, sort_keys=True))
        return
    now = time.time()
    click.echo(f"{'id':>6} {'site':<20} {'state':<8} {'expires':<20} {'batch':<12} pilots  note")
    for item in found:
        expires = "never"
        if item.expires_at is not None:
            expires = format_relative(int(item.expires_at), int(now))
        click.echo(
            f"{item.id:>6} {item.site:<20} {item.state(now):<8} {expires:<20} "
            f"{item.batch_id or '-':<12} {item.pilots:>6}  {item.note}"
        )


@credential.command()
@click.argument("credential_id", type=click.IntRange(1, 2**63 - 1))
@url_option
@token_option
@ca_option
def revoke(credential_id: int, url: str | None, token: str | None, ca_file: str | None) -> None:
    """Revoke a credential: every later call with it is refused; its pilots end at once."""
    ended = operator_client(url, token, ca_file).revoke_credential(credential_id)
    click.echo(f"credential {credential_id} revoked; {len(ended)} pilot(s) ended")
