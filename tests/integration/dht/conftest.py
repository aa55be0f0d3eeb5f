"""The DHT's nodes are asyncio servers: an ``async def`` test here runs in an event loop of its
own (``asyncio.run``), given its fixtures as a plain test is."""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None  # a plain test: pytest calls it
    arguments = {name: pyfuncitem.funcargs[name] for name in inspect.signature(test).parameters}
    asyncio.run(test(**arguments))
    return True
