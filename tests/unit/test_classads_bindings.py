"""The one boundary over classad2 loads with every classad2 a node may have: the PyPI wheel's
(25.x, with ``ClassAdException``) and HTCondor 23.9's Debian package's, which glideins and worker
nodes run (no ``ClassAdException``: a pilot's own ad was checked through it and died at start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_boundary_loads_with_a_classad2_that_has_no_classadexception(tmp_path: Path) -> None:
    fake = tmp_path / "classad2"
    fake.mkdir()
    (fake / "__init__.py").write_text("class ClassAd:\n    pass\n")  # what an older one lacks
    code = (
        "import glidein_ext.classads as c\n"
        "assert c._OWN_ERROR is ValueError and ValueError in c._FAILURES\n"
        "print('loaded')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded"
