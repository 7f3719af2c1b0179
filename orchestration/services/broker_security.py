"""How the embedded broker is secured (``kprio broker start --security``): its listeners, users and client settings.

Four modes (:class:`Security`), and mutual TLS as an option of the two with TLS:

- ``plaintext`` (the default): no authentication, no encryption;
- ``sasl_plaintext``: SASL with SCRAM-SHA-512 and PLAIN, no encryption;
- ``sasl_ssl``: the same over TLS (what Confluent Cloud and most managed clusters take);
- ``ssl``: TLS, and with ``mtls`` clients authenticated by their certificate.

Every listener of a node, the quorum's (``CONTROLLER``) too, takes the same security: nodes authenticate to each
other with PLAIN as ``kprio`` under SASL, by certificate under ``ssl`` (the controller listener always requires it).
One client user, ``kprio``, exists under both mechanisms: PLAIN's from the listener's JAAS line, SCRAM's created via
the admin API at every start with ``KPRIO_KAFKA_SASL_PASSWORD`` (so a changed password takes effect on the next).

No secret is written: ``server.properties`` names the variables (Kafka's ``EnvVarConfigProvider``, allowed to read
those two only), the nodes' JVMs get them in their environment, and the keystores (:mod:`orchestration.services.tls`)
are encrypted with ``KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD``. The client settings a start prints name the variables only.

>>> s = BrokerSecurity(Security.SASL_SSL)
>>> s.protocol, s.listener, s.secret_variables()
('SASL_SSL', 'SASL_SSL', ('KPRIO_KAFKA_SASL_PASSWORD',))
>>> s.required_variables()
('KPRIO_KAFKA_SASL_PASSWORD', 'KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD')
>>> sorted(s.client_settings(TlsFiles(Path("/d/tls"))).items())  # doctest: +NORMALIZE_WHITESPACE
[('sasl.mechanism', 'SCRAM-SHA-512'), ('sasl.username', 'kprio'), ('security.protocol', 'SASL_SSL'),
 ('ssl.ca.location', '/d/tls/ca.pem')]
>>> sorted(BrokerSecurity(Security.SSL, mtls=True).client_settings(TlsFiles(Path("/d/tls"))).items())
... # doctest: +NORMALIZE_WHITESPACE
[('security.protocol', 'SSL'), ('ssl.ca.location', '/d/tls/ca.pem'), ('ssl.keystore.location', '/d/tls/client.p12')]
>>> BrokerSecurity().client_settings(TlsFiles(Path("/d/tls"))), BrokerSecurity().secret_variables()
({}, ())
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from kprio_core.config import setting_variable
from orchestration.services.tls import TlsFiles

PASSWORD_VARIABLE = setting_variable("sasl.password")
KEYSTORE_VARIABLE = setting_variable("ssl.keystore.password")
USER = "kprio"
SCRAM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
SECURITY_FILE = "kprio-security.json"
"""The data dir's record of how it was last started secured (the mode, never a secret)."""

ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class Security(StrEnum):
    """``kprio broker start --security``: the security protocol of every listener of the embedded broker."""

    PLAINTEXT = "plaintext"
    SASL_PLAINTEXT = "sasl_plaintext"
    SASL_SSL = "sasl_ssl"
    SSL = "ssl"


@dataclass(frozen=True)
class BrokerSecurity:
    """The embedded broker's security: the mode, and whether clients must present a certificate."""

    mode: Security = Security.PLAINTEXT
    mtls: bool = False

    def __post_init__(self) -> None:
        if self.mtls and not self.tls:
            raise ValueError(f"--mtls needs TLS: --security ssl or sasl_ssl, not {self.mode.value}")

    @property
    def protocol(self) -> str:
        """Kafka's name of the security protocol (``SASL_SSL``)."""
        return self.mode.value.upper()

    @property
    def listener(self) -> str:
        """The name of the clients' listener (the protocol's own name, as Kafka maps it by default)."""
        return self.protocol

    @property
    def secured(self) -> bool:
        return self.mode is not Security.PLAINTEXT

    @property
    def sasl(self) -> bool:
        return self.mode in (Security.SASL_PLAINTEXT, Security.SASL_SSL)

    @property
    def tls(self) -> bool:
        return self.mode in (Security.SSL, Security.SASL_SSL)

    def describe(self) -> str:
        """What clients must do, in a few words.

        >>> BrokerSecurity(Security.SASL_SSL, mtls=True).describe()
        'SASL_SSL (SCRAM-SHA-512 and PLAIN, user kprio; TLS with client certificates)'
        """
        parts = [f"{SCRAM} and PLAIN, user {USER}"] if self.sasl else []
        if self.tls:
            parts.append("TLS with client certificates" if self.mtls else "TLS")
        return f"{self.protocol} ({'; '.join(parts)})" if parts else self.protocol

    def required_variables(self) -> tuple[str, ...]:
        """The environment variables a start needs: the SASL password, the keystores' password."""
        return ((PASSWORD_VARIABLE,) if self.sasl else ()) + ((KEYSTORE_VARIABLE,) if self.tls else ())

    def secret_variables(self) -> tuple[str, ...]:
        """The variables a kprio client needs besides :meth:`client_settings`."""
        return ((PASSWORD_VARIABLE,) if self.sasl else ()) + ((KEYSTORE_VARIABLE,) if self.mtls else ())

    def missing(self, env: Mapping[str, str]) -> list[str]:
        return [name for name in self.required_variables() if not env.get(name)]

    def client_settings(self, files: TlsFiles) -> dict[str, str]:
        """A kprio client's ``kafka.client`` settings for this broker (librdkafka's; no secret)."""
        if not self.secured:
            return {}
        conf = {"security.protocol": self.protocol}
        if self.sasl:
            conf.update({"sasl.mechanism": SCRAM, "sasl.username": USER})
        if self.tls:
            conf["ssl.ca.location"] = str(files.ca)
        if self.mtls:
            conf["ssl.keystore.location"] = str(files.client)
        return conf

    def client_config(self, files: TlsFiles, env: Mapping[str, str], *, mechanism: str = SCRAM) -> dict[str, str]:
        """The librdkafka settings of the broker's own probes (``mechanism``: PLAIN before SCRAM's user
        exists), secrets from ``env``; never log this."""
        conf = self.client_settings(files)
        if self.sasl:
            conf.update({"sasl.mechanism": mechanism, "sasl.password": env[PASSWORD_VARIABLE]})
        if self.mtls:
            conf["ssl.keystore.password"] = env[KEYSTORE_VARIABLE]
        return conf

    def server_properties(self, files: TlsFiles) -> dict[str, str]:
        """The ``server.properties`` entries of the security of every listener (none for plaintext)."""
        if not self.secured:
            return {}
        props = {
            "config.providers": "env",
            "config.providers.env.class": ENV_PROVIDER,
            "config.providers.env.param.allowlist.pattern": f"^({'|'.join(self.required_variables())})$",
        }
        if self.sasl:
            plain = (f'{PLAIN_MODULE} required username="{USER}" password="${{env:{PASSWORD_VARIABLE}}}" '
                     f'user_{USER}="${{env:{PASSWORD_VARIABLE}}}";')
            name = self.listener.lower()
            props.update({
                "sasl.enabled.mechanisms": f"{SCRAM},PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.mechanism.controller.protocol": "PLAIN",
                f"listener.name.{name}.plain.sasl.jaas.config": plain,
                f"listener.name.{name}.{SCRAM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
                "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": plain,
            })
        if self.tls:
            props.update({
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(files.broker),
                "ssl.keystore.password": f"${{env:{KEYSTORE_VARIABLE}}}",
                "ssl.key.password": f"${{env:{KEYSTORE_VARIABLE}}}",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(files.ca),
            })
        if self.mtls:
            props["ssl.client.auth"] = "required"
        if self.mode is Security.SSL:
            # Without SASL the quorum's listener authenticates nodes by their certificate.
            props["listener.name.controller.ssl.client.auth"] = "required"
        return props

    # -- the data dir's record ------------------------------------------------------------------

    def save(self, data_dir: Path) -> None:
        path = data_dir / SECURITY_FILE
        if self.secured:
            path.write_text(json.dumps({"mode": self.mode.value, "mtls": self.mtls}) + "\n")
        else:
            path.unlink(missing_ok=True)

    @classmethod
    def recorded(cls, data_dir: Path) -> BrokerSecurity | None:
        """How the data dir was last started (None: never secured, or no record)."""
        try:
            doc = json.loads((data_dir / SECURITY_FILE).read_text())
            return cls(Security(doc["mode"]), bool(doc.get("mtls", False)))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "mode": self.mode.value}
