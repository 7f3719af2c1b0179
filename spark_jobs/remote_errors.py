"""Turn a kprio error raised on an executor back into its type on the driver.

Spark wraps an executor's Python exception into its own (``PythonException``), keeping the
original traceback text. The last ``kprio_core.errors.<Name>: <message>`` line of that text
becomes the typed error again, with the Spark exception as its cause.

>>> err = kprio_error_in(RuntimeError("...\\nkprio_core.errors.RangeIncomplete: range t[0]@[0,5) is incomplete\\n SQLSTATE: 38000"))
>>> type(err).__name__, str(err)
('RangeIncomplete', 'range t[0]@[0,5) is incomplete')
>>> kprio_error_in(RuntimeError("boom")) is None
True
"""

from __future__ import annotations

import re

from kprio_core import errors

_LINE = re.compile(r"kprio_core\.errors\.(\w+): (.+)")


def kprio_error_in(exc: BaseException) -> errors.KprioError | None:
    """The kprio error named in ``exc``'s text, rebuilt with the same type and message, or None."""
    found = _LINE.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.KprioError)):
        return None
    rebuilt = cls.__new__(cls)
    Exception.__init__(rebuilt, message.strip())  # bypass custom __init__s: the text is final
    return rebuilt
