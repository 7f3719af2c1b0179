"""The last guard on what a command prints or logs: every secret kprio can know of is replaced by ``***``.

Secrets are kept out of messages where they are made (URLs without password, ``SecretStr`` settings); this catches
what a library's text still carries (a driver echoing a connection string, a ``--debug`` traceback): the values of
credential variables (:func:`secret_variable`) and of the credentials of URLs on the command line, URL-encoded too.

>>> redact = Redactor.of({"KPRIO_LEDGER_PASSWORD": "hunter2", "HOME": "/root"}, ["--x", "postgresql://u:p%40ss@h/db"])
>>> redact("login hunter2 failed for postgresql://u:p%40ss@h/db (p@ss), home /root")
'login *** failed for postgresql://u:***@h/db (***), home /root'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, quote_plus

from kprio_core.config import ENV_KAFKA_PREFIX, is_secret_setting, variable_setting
from kprio_core.urls import url_secrets

SECRET_WORDS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "PRIVATE_KEY", "JAAS")
"""An environment variable whose name holds one of these holds a credential."""

SHORTEST = 3
"""Values shorter than this are not replaced: every 'a' of a message would go."""


def secret_variable(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential.

    >>> secret_variable("KPRIO_KAFKA_SSL_KEY_PEM"), secret_variable("PGPASSWORD"), secret_variable("KPRIO_CONFIG")
    (True, True, False)
    """
    upper = name.upper()
    if upper.startswith(ENV_KAFKA_PREFIX) and is_secret_setting(variable_setting(upper)):
        return True
    return any(word in upper for word in SECRET_WORDS)


class Redactor:
    """Replaces known secret values in text by ``***``; build it with :meth:`of`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {form for s in secrets if len(s) >= SHORTEST for form in (s, quote(s, safe=""), quote_plus(s))}
        self._secrets = sorted(forms, key=len, reverse=True)  # the longest first: a secret inside another

    @classmethod
    def of(cls, env: Mapping[str, str], argv: Sequence[str] = ()) -> Redactor:
        """The secrets of ``env``'s credential variables and of the URLs among ``argv``."""
        found = [value for name, value in env.items() if value and secret_variable(name)]
        for arg in argv:
            for part in (arg, arg.partition("=")[2]):  # --postgres-url=postgresql://...
                if "://" in part:
                    found += url_secrets(part)
        return cls(found)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text
