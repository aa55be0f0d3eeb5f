"""``tq serve`` on SQLite does not import the PostgreSQL driver: a subprocess builds the whole
service (store on a SQLite file, application, lifespan's loops) as ``tq serve`` does and lists the
psycopg modules it loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings

settings = TqSettings(database=sys.argv[1], operator_token="op", pilot_token="pilot")
store = open_store(settings)
build_app(store, settings)
store.engine.dispose()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0].startswith("psycopg"))))
"""


def test_serve_on_sqlite_does_not_import_psycopg(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "tq.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == [], f"tq serve on SQLite imported {loaded[:5]}"
    assert (tmp_path / "tq.sqlite").exists()  # it did open the store
