"""Loading a record handler by name (``drain.handler``, ``"module:function"``) and checking its signature: at load
(naming the setting), again in the drain; what it must do is :mod:`spark_jobs.handler_contract`'s.

>>> resolve_handler("nosuchmodule")
Traceback (most recent call last):
...
kprio_core.errors.HandlerError: expected 'module:function' (drain.handler 'nosuchmodule')
>>> resolve_handler("json:dumps")
Traceback (most recent call last):
...
kprio_core.errors.HandlerError: signature (obj, *, skipkeys=False, ...) does not accept (frames, context) (drain.handler 'json:dumps')
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from kprio_core.errors import HandlerError


def resolve_handler(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` and check it takes ``(frames, context)``; HandlerError otherwise."""
    where = f"drain.handler {spec!r}"
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HandlerError("expected 'module:function'", where=where)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the handler's
        raise HandlerError(f"cannot import {module_name!r}: {type(err).__name__}: {err}", where=where) from None
    func = module
    for part in attr.split("."):
        func = getattr(func, part, None)
        if func is None:
            raise HandlerError(f"module {module_name!r} has no {attr!r}", where=where)
    if not callable(func):
        raise HandlerError(f"{attr!r} is a {type(func).__name__}, not a function", where=where)
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return func  # builtins without a signature: trust and let the call tell
    try:
        signature.bind(iter(()), None)
    except TypeError:
        raise HandlerError(f"signature {_short(signature)} does not accept (frames, context)", where=where) from None
    return func


def _short(signature: inspect.Signature) -> str:
    text = str(signature)
    return text if len(text) <= 32 else text[:28].rsplit(",", 1)[0] + ", ...)"
