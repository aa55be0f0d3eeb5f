"""Layered settings, generic: packaged defaults < TOML file < environment < command-line flags.

Each part of the product declares its own frozen dataclass of settings beside its users
(``glidein/settings.py``, ``agent/settings.py``, ``tq/service/settings.py``), a
:class:`LayeredSettings` naming its own prefix, and loads it with ``load()``: the file is
``--config FILE`` or ``$<PREFIX>CONFIG``; a key ``name`` is overridden by ``$<PREFIX><NAME>`` and
then by a flag.  Values are checked here, once, and a bad value raises ConfigError naming the
setting and where it came from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing import Self

from glidein_ext.errors import ConfigError


def _coerce(name: str, raw: Any, kind: type, origin: str) -> Any:
    if kind is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{origin}: setting {name} must be a number, got {raw!r}")
        try:
            return float(raw) if isinstance(raw, (int, float)) else float(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{origin}: setting {name} must be a number, got {raw!r}") from None
    if kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{origin}: setting {name} must be an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip(), 10)
        except ValueError:
            raise ConfigError(f"{origin}: setting {name} must be an integer, got {raw!r}") from None
    return str(raw)


def read_toml(path: str) -> dict[str, Any]:
    """A TOML file's table; ConfigError if unreadable or malformed.

    ``tomllib`` is standard from Python 3.11; on the worker nodes' 3.9 the ``tomli`` backport is
    used when installed, else a settings file is refused with a clear error (environment variables
    and flags still work).
    """
    try:
        import tomllib as toml
    except ImportError:
        try:
            import tomli as toml  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ImportError:
            raise ConfigError(
                f"cannot read config file {path}: TOML needs Python 3.11+ or the tomli package "
                "(use GLIDEIN_EXT_* environment variables or flags instead)"
            ) from None
    try:
        with open(path, "rb") as handle:
            data: dict[str, Any] = toml.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except toml.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return data


class LayeredSettings:
    """The base of a part's frozen dataclass of settings: ``env_prefix`` (a ClassVar) names its
    environment variables, ``check()`` validates it, ``load()`` builds it from the layers."""

    env_prefix: ClassVar[str]

    def check(self) -> Self:
        """These settings, each value checked; ConfigError names a bad one."""
        return self

    @classmethod
    def load(
        cls,
        config_file: str | None = None,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Self:
        """The settings from the layers: the defaults < the TOML file (``config_file`` or
        ``$<env_prefix>CONFIG``) < ``$<env_prefix><NAME>`` < ``overrides`` (flags; None ignored)."""
        environ = os.environ if env is None else env
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        defaults = cls()
        kinds = {name: type(getattr(defaults, name)) for name in names}
        values: dict[str, Any] = {}

        path = config_file or environ.get(f"{cls.env_prefix}CONFIG")
        if path:
            data = read_toml(path)
            for key, raw in data.items():
                if key not in kinds:
                    raise ConfigError(f"config file {path}: unknown setting {key!r}")
                values[key] = _coerce(key, raw, kinds[key], f"config file {path}")

        for name in names:
            env_name = f"{cls.env_prefix}{name.upper()}"
            if env_name in environ:
                values[name] = _coerce(name, environ[env_name], kinds[name], f"${env_name}")

        for name, raw in (overrides or {}).items():
            if raw is None:
                continue
            if name not in kinds:
                raise ConfigError(f"unknown setting {name!r}")
            values[name] = _coerce(name, raw, kinds[name], f"--{name.replace('_', '-')}")

        return cls(**values).check()
