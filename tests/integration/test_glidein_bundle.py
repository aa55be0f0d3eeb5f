"""scripts/build-glidein-bundle: what the shipped factory XML names, and a bundle that runs alone.

The bundle is built once per module (pip downloads click and watchdog for Python 3.9; its cache
makes that quick).  The shipped factory XML must be well-formed and name the files the build
writes, the directory attribute and the settings the custom script reads; the frontend XML in
docs/frontend.md must be the shipped one.  The untarred bundle then sets a glidein up with a
Python that has nothing installed (a bare venv): click and watchdog come from the bundle's lib/.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from glidein_ext.adfile import read_ad
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA
from tests.support.glideinwms import (
    REPO,
    SETUP_SCRIPT,
    build_factory_files,
    config_values,
    error_gen_calls,
    frontend_match,
    make_glidein_config,
)


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build's output directory, which the build makes: glidein-ext.tar.gz and
    glidein-ext-setup.sh."""
    return build_factory_files(tmp_path_factory.mktemp("factory") / "new")


def test_a_directory_the_build_cannot_make_is_one_line() -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "build-glidein-bundle"), "/proc/no/such/dir/glidein-ext.tar.gz"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "build-glidein-bundle: cannot create the directory /proc/no/such/dir for "
        "/proc/no/such/dir/glidein-ext.tar.gz"
    ]


def doc_block(doc: str, heading: str, language: str) -> str:
    """The first ```language block after ``heading`` in ``doc`` (a path in the checkout)."""
    text = (REPO / doc).read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match, f"no {language} block under {heading}"
    return match.group(1)


def parse_xml(text: str) -> ET.Element:
    """Parse XML from our own docs (ParseError if it is not well-formed)."""
    return ET.fromstring(text)  # noqa: S314 -- our own text, not untrusted input


def script_settings() -> set[str]:
    """The glidein_config entries the custom script reads (cfg_get NAME)."""
    return set(re.findall(r"cfg_get (GLIDEIN_EXT_[A-Z_]+)", SETUP_SCRIPT.read_text()))


def test_bundle_holds_the_package_its_dependencies_and_the_script(factory: Path) -> None:
    assert sorted(p.name for p in factory.iterdir()) == [
        "glidein-ext-setup.sh",
        "glidein-ext.tar.gz",
    ]
    assert (factory / "glidein-ext-setup.sh").read_bytes() == SETUP_SCRIPT.read_bytes()
    with tarfile.open(factory / "glidein-ext.tar.gz") as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        listing = (tar.extractfile("./BUNDLE.txt") or pytest.fail("no BUNDLE.txt")).read()
    for name in (
        "glidein_ext/__main__.py",
        "glidein_ext/entry.py",
        "glidein_ext/condor_config.d/50-glidein-ext-glidein.config",
        "glidein_ext/frontend/glidein-ext-frontend.xml",
        "glidein_ext/agent/agent.py",
        "glidein_ext/dht/node.py",
        "lib/click/__init__.py",
        "lib/watchdog/observers/inotify.py",
        "glidein-ext-setup.sh",
    ):
        assert name in members, name
    assert not [n for n in members if "__pycache__" in n or n.endswith(".pyc")]
    assert "glidein_ext/factory/glidein-ext-factory.xml" in members
    # The glidein side only: nothing of the Task Queue service, the simulator, the sandbox or the
    # demos (Python 3.11 and packages a worker node lacks).
    for left_out in (
        "glidein_ext/tq/service/",
        "glidein_ext/tq/manager/",
        "glidein_ext/tq/models.py",
        "glidein_ext/tq/workflow.py",
        "glidein_ext/sim/",
        "glidein_ext/sandbox/",
        "glidein_ext/demos/",
        "glidein_ext/cli/tq/",
        "glidein_ext/cli/experiment.py",
    ):
        assert not [n for n in members if n.startswith(left_out)], left_out
    for kept in ("glidein_ext/tq/client/client.py", "glidein_ext/cache/store.py"):
        assert kept in members, kept
    assert not [n for n, m in members.items() if m.mode & stat.S_IWOTH or m.mode & stat.S_IWGRP]
    # click 8.2+ needs Python 3.10: the bundle carries the 8.1 line.
    text = listing.decode()
    assert re.search(r"click-8\.1\.\d+-py3-none-any\.whl", text), text
    assert "watchdog-" in text


FACTORY_XML = REPO / "glidein_ext" / "factory" / "glidein-ext-factory.xml"


def test_shipped_factory_xml_names_what_the_build_writes(factory: Path) -> None:
    root = parse_xml(FACTORY_XML.read_text(encoding="utf-8"))
    assert root.tag == "glidein"  # one root, standing for glideinWMS.xml's own (docs/factory.md)
    files = root.findall("files/file")
    assert len(files) == 2
    bundle, script = files
    assert Path(bundle.get("absfname", "")).name == "glidein-ext.tar.gz"
    assert (bundle.get("untar"), bundle.get("executable")) == ("True", "False")
    untar = bundle.find("untar_options")
    assert untar is not None and untar.get("absdir_outattr") == "GLIDEIN_EXT_DIR"
    assert Path(script.get("absfname", "")).name == "glidein-ext-setup.sh"
    assert (script.get("untar"), script.get("executable")) == ("False", "True")
    # Every file the XML names is one the build writes, in one directory.
    assert {Path(f.get("absfname", "")).name for f in files} == {p.name for p in factory.iterdir()}
    assert len({Path(f.get("absfname", "")).parent for f in files}) == 1
    # The attributes are exactly the settings the custom script reads (GLIDEIN_EXT_DIR comes
    # from absdir_outattr), each with a value the script accepts.
    attrs = {a.get("name"): a for a in root.findall("attrs/attr")}
    assert set(attrs) | {"GLIDEIN_EXT_DIR"} == script_settings()
    for name in ("GLIDEIN_EXT_CRON_PERIOD", "GLIDEIN_EXT_PRIORITY_FACTOR"):
        assert attrs[name].get("type") == "int" and attrs[name].get("value", "").isdigit()
    assert attrs["GLIDEIN_EXT_REQUIRED"].get("value") in {"True", "False"}
    assert all(a.get("parameter") == "True" and a.get("publish") == "False" for a in attrs.values())


def _imports(path: Path, module: str) -> set[str]:
    """The glidein_ext modules a source file imports (anywhere in it, lazily too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("glidein_ext")}


def test_the_bundle_imports_only_what_it_carries(factory: Path, tmp_path: Path) -> None:
    with tarfile.open(factory / "glidein-ext.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    modules: dict[str, Path] = {}
    for path in (tmp_path / "glidein_ext").rglob("*.py"):
        name = ".".join(path.relative_to(tmp_path).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    missing: dict[str, set[str]] = {}
    for name, path in modules.items():
        for imported in _imports(path, name):
            # "from pkg import name": a module, or a name defined in the module pkg
            if imported not in modules and imported.rpartition(".")[0] not in modules:
                missing.setdefault(name, set()).add(imported)
    assert not missing, missing


def test_the_documented_frontend_xml_is_the_shipped_one() -> None:
    block = parse_xml(doc_block("docs/frontend.md", "## The configuration", "xml"))
    shipped = frontend_match()
    assert block.attrib == shipped.attrib
    assert set(block.attrib) == {"match_expr", "start_expr"}

    def attrs(root: ET.Element, where: str) -> list[str | None]:
        return [m.get("name") for m in root.findall(f"{where}/match_attrs/match_attr")]

    for where in ("factory", "job"):
        assert attrs(block, where) == attrs(shipped, where)
    # The expressions read only the attributes declared for them.
    assert set(attrs(shipped, "job")) == set(
        re.findall(r"job\.get\('(\w+)'\)", shipped.get("match_expr", ""))
    )
    assert set(attrs(shipped, "job")) == set(
        re.findall(r"TARGET\.(\w+)", shipped.get("start_expr", ""))
    )


def test_untarred_bundle_sets_a_glidein_up_with_a_bare_python(
    factory: Path, tmp_path: Path
) -> None:
    # A Python with nothing installed: click and watchdog must come from the bundle.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    no_click = subprocess.run([str(python), "-c", "import click"], capture_output=True, check=False)
    assert no_click.returncode != 0
    ext, start, work = tmp_path / "glidein_ext", tmp_path / "start", tmp_path / "work"
    for directory in (ext, start, work):
        directory.mkdir()
    with tarfile.open(factory / "glidein-ext.tar.gz") as tar:
        tar.extractall(ext, filter="data")
    config = make_glidein_config(
        tmp_path,
        {
            "GLIDEIN_EXT_DIR": str(ext),
            "GLIDEIN_EXT_PYTHON": str(python),
            "GLIDEIN_START_DIR_ORIG": str(start),
            "GLIDEIN_WORK_DIR": str(work),
            "GLIDEIN_CPUS": "4",
            "GLIDEIN_Name": "bundle-test",
        },
    )
    proc = subprocess.run(
        ["bash", str(factory / "glidein-ext-setup.sh"), str(config), "main"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert proc.returncode == 0, proc.stderr
    assert error_gen_calls(tmp_path)[0][:4] == [
        "-ok",
        "glidein-ext-setup.sh",
        "GlideinExtEnabled",
        "True",
    ]
    assert read_ad(str(start / ".pilot.ad"), PILOT_AD_SCHEMA)["USED_FRACTION1k"] == 0
    assert (work / "condor_config.d" / "50-glidein-ext-glidein.config").is_file()
    launcher = config_values(config)["GLIDEIN_EXT_BIN"]
    assert launcher == str(ext / "bin" / "glidein-ext")
    # What HTCondor runs: the cron (fast path, no click) and a click command.
    cron = subprocess.run(
        [launcher, "cron", "--start-dir", str(start), "--todie", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "GLIDEIN_RetireNow = false" in cron.stdout
    shown = subprocess.run(
        [launcher, "pilot-ad", "show", str(start), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert '"USED_FRACTION1k": 0' in shown.stdout
    # The Task Queue's commands are not in the bundle: one line saying so.
    absent = subprocess.run(  # away from the repository (python -m puts the cwd first)
        [launcher, "tq", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert absent.returncode != 0
    assert absent.stderr.strip().splitlines() == [
        "glidein-ext: error: glidein-ext tq is not in this install (the glidein bundle has the "
        "glidein side only): pip install '.[tq]' in a glidein-ext checkout (the Task Queue "
        "service needs Python 3.11+)"
    ]
