"""Database URLs as kprio shows them: never with a password, wherever the URL hides one.

A SQLAlchemy URL carries credentials in its user info and query string (``?password=``, ``?sslpassword=``; libpq's
``?passfile=`` is a path): :func:`url_secrets` names them, :func:`shown_url` replaces each with ``***``,
:func:`bare_url` leaves them out.

>>> url = "postgresql+psycopg://kprio:s3cret@db:5432/ledger?sslmode=require&password=other"
>>> shown_url(url)
'postgresql+psycopg://kprio:***@db:5432/ledger?password=***&sslmode=require'
>>> bare_url(url)
'postgresql+psycopg://kprio@db:5432/ledger?sslmode=require'
>>> url_secrets(url)
['s3cret', 'other']
>>> shown_url("not a url"), url_secrets("not a url")
('(not a URL)', [])
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

SECRET_PARAMETER_WORDS = ("password", "passwd", "pwd", "secret", "token", "credential", "apikey", "api_key", "api-key")
"""A query parameter whose name holds one of these carries a credential (``sslpassword``, ``client_secret``, ...)."""

UNPARSABLE = "(not a URL)"


def parsed_url(url: str | URL) -> URL:
    """SQLAlchemy's parse of ``url``; its ArgumentError (whose text never echoes the URL) when it is none."""
    from sqlalchemy.engine import make_url

    return make_url(url)


def secret_parameters(url: URL) -> list[str]:
    """The query parameters of ``url`` that carry a credential (by name, see :data:`SECRET_PARAMETER_WORDS`).

    >>> secret_parameters(parsed_url("postgresql://u@h/db?sslpassword=x&passfile=/p&sslmode=verify-full"))
    ['sslpassword']
    """
    return [key for key in url.query if secret_parameter(key)]


def secret_parameter(key: str) -> bool:
    """Whether a URL's query parameter ``key`` carries a credential (``passfile`` is a path).

    >>> [secret_parameter(k) for k in ("api_key", "sslpassword", "passfile", "sslmode")]
    [True, True, False, False]
    """
    name = key.lower()
    return name != "passfile" and any(word in name for word in SECRET_PARAMETER_WORDS)


_EMBEDDED = re.compile(r"(?i)\b\w*(?:password|passwd|pwd|secret|token|credential)\w*\s*=\s*('[^']*'|[^\s&']+)")
"""``password=...`` inside another part of the URL: libpq reads a database name that holds ``=`` as a whole
connection string, and ``?options=-c password=...`` is passed to the server."""


def url_secrets(url: str | URL) -> list[str]:
    """Every credential ``url`` holds, ``password=`` inside its database name or a parameter too; [] when unparsable.

    >>> url_secrets("postgresql://u@h/dbname=x password=s3cret?options=-c%20token%3Dt0k")
    ['t0k', 's3cret']
    """
    try:
        parsed = parsed_url(url)
    except Exception:  # noqa: BLE001 - ArgumentError, or a value that is no string at all
        return []
    found = [parsed.password] if parsed.password else []
    secret = set(secret_parameters(parsed))
    for key, value in parsed.query.items():
        values = [value] if isinstance(value, str) else list(value)
        found.extend(values if key in secret else [m.group(1).strip("'") for v in values for m in _EMBEDDED.finditer(v)])
    found.extend(m.group(1).strip("'") for m in _EMBEDDED.finditer(parsed.database or ""))
    return [str(s) for s in found if s]


def shown_url(url: str | URL) -> str:
    """``url`` with its password and secret query values replaced by ``***`` (safe to print, log or store)."""
    try:
        parsed = parsed_url(url)
    except Exception:  # noqa: BLE001 - its text could hold the secret: show none of it
        return UNPARSABLE
    hidden = {key: "***" for key in secret_parameters(parsed)}
    shown = parsed.update_query_dict(hidden).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")
    for secret in url_secrets(parsed):  # the ones inside another part (see _EMBEDDED), as the URL writes them
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            shown = shown.replace(form, "***")
    return shown


def bare_url(url: str | URL) -> str:
    """``url`` without its password and secret query parameters: the URL to write once they are in the environment."""
    try:
        parsed = parsed_url(url)
    except Exception:  # noqa: BLE001
        return UNPARSABLE
    from sqlalchemy.engine import URL

    kept = parsed.difference_update_query(secret_parameters(parsed))
    bare = URL.create(kept.drivername, kept.username, None, kept.host, kept.port, kept.database,
                      kept.query).render_as_string(hide_password=False)
    for secret in url_secrets(parsed):  # one inside another part of the URL cannot be left out: it is hidden
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            bare = bare.replace(form, "***")
    return bare
