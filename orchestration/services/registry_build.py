"""The embedded schema registry's application, built once from Maven Central into kprio's cache.

Apicurio Registry (a Quarkus application serving the Confluent-compatible API at ``/apis/ccompat/v7``) is on Maven
Central only in parts: a throwaway ``pom.xml`` depends on ``io.apicurio:apicurio-registry-app`` and the
``quarkus-maven-plugin`` (the Quarkus of Apicurio's own BOM) builds a fast-jar from it. ``scripts/setup.sh`` runs
the build (``python3 -m orchestration.services.registry_build``); later runs only read the cache.

Basic auth without Keycloak: the build adds ``quarkus-elytron-security-properties-file`` (users from configuration),
fixes HTTP basic auth over its embedded realm at build time (as Quarkus 2.16 requires) and excludes Apicurio's OIDC
mechanism (``quarkus.arc.exclude-types``), a CDI alternative that would hide basic auth. Anyone gets in until a
start turns on ``registry.auth.enabled`` with users (:class:`~orchestration.services.registry.EmbeddedRegistry`).

Two artifacts Apicurio 2.4.2.Final names are not served by Maven Central and are substituted:

- ``com.github.everit-org.json-schema:org.everit.json.schema:1.14.2`` is the same library as
  ``com.github.erosb:everit-json-schema:1.14.2`` (its later coordinates);
- ``io.apicurio:apicurio-common-app-components-config-index[-deployment]:0.1.18.Final``: 0.1.10.Final
  is served and carries the same runtime class.

Maven's default settings apply (a machine's mirror or proxy). The application lives in
``<cache>/registry/<version>-basic-auth/app/``; it is complete when ``kprio-registry-build.json`` exists, written
last, so a build cut short is done again. The first build downloads about 210 MB of jars.

>>> "<artifactId>apicurio-registry-app</artifactId>" in pom_xml("2.4.2.Final", "2.16.4.Final")
True
>>> app_dir("2.4.2.Final").parts[-3:]
('registry', '2.4.2.Final-basic-auth', 'app')
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kprio_core.errors import KprioError
from kprio_core.jar_cache import cache_dir

REGISTRY_VERSION = "2.4.2.Final"
QUARKUS_VERSION = "2.16.4.Final"
"""The Quarkus of Apicurio 2.4.2.Final's BOM (``quarkus.version`` in ``io.apicurio:apicurio-registry``)."""
CONFIG_INDEX_VERSION = "0.1.10.Final"
EVERIT = ("com.github.erosb", "everit-json-schema", "1.14.2")
DONE_FILE = "kprio-registry-build.json"
RUN_JAR = "quarkus-run.jar"


class RegistryBuildFailed(KprioError):
    """The registry application is not in the cache and Maven could not build it."""

    code = "registry_build_failed"


BUILD = "basic-auth"
"""What kprio's build adds, part of the cache's key: a build of another kind (without basic auth) is rebuilt beside."""


def registry_dir(version: str = REGISTRY_VERSION) -> Path:
    return cache_dir() / "registry" / f"{version}-{BUILD}"


def app_dir(version: str = REGISTRY_VERSION) -> Path:
    return registry_dir(version) / "app"


def built(version: str = REGISTRY_VERSION) -> Path | None:
    """The runnable ``quarkus-run.jar`` of a completed build, or None."""
    jar = app_dir(version) / RUN_JAR
    return jar if (registry_dir(version) / DONE_FILE).is_file() and jar.is_file() else None


def _dep(group: str, artifact: str, version: str, extra: str = "") -> str:
    return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{extra}</dependency>")


def pom_xml(version: str, quarkus: str) -> str:
    """A jar project whose only content is Apicurio's application, built by Quarkus into a fast-jar."""
    managed = "".join([
        _dep("io.apicurio", "apicurio-registry", version, "<type>pom</type><scope>import</scope>"),
        _dep("io.apicurio", "apicurio-common-app-components-config-index", CONFIG_INDEX_VERSION),
        _dep("io.apicurio", "apicurio-common-app-components-config-index-deployment", CONFIG_INDEX_VERSION),
    ])
    everit_out = ("<exclusions><exclusion><groupId>com.github.everit-org.json-schema</groupId>"
                  "<artifactId>org.everit.json.schema</artifactId></exclusion></exclusions>")
    deps = "".join([_dep("io.apicurio", "apicurio-registry-app", version, everit_out), _dep(*EVERIT),
                    _dep("io.quarkus", "quarkus-elytron-security-properties-file", quarkus)])
    plugin = (f"<plugin><groupId>io.quarkus</groupId><artifactId>quarkus-maven-plugin</artifactId>"
              f"<version>{quarkus}</version><executions><execution><goals><goal>build</goal></goals>"
              "</execution></executions></plugin>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>kprio.cache</groupId><artifactId>kprio-registry</artifactId><version>{version}</version>"
            "<properties><maven.compiler.release>17</maven.compiler.release>"
            "<project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>"
            # The app's jar has no Jandex index nor beans.xml: without these Quarkus sees none of its beans.
            "<quarkus.index-dependency.registry-app.group-id>io.apicurio</quarkus.index-dependency.registry-app.group-id>"
            "<quarkus.index-dependency.registry-app.artifact-id>apicurio-registry-app"
            "</quarkus.index-dependency.registry-app.artifact-id>"
            # Fixed at build time in Quarkus 2.16: basic auth over the embedded realm, not Apicurio's OIDC mechanism.
            "<quarkus.http.auth.basic>true</quarkus.http.auth.basic>"
            "<quarkus.security.users.embedded.enabled>true</quarkus.security.users.embedded.enabled>"
            "<quarkus.arc.exclude-types>io.apicurio.common.apps.auth.authn.AppAuthenticationMechanism"
            "</quarkus.arc.exclude-types></properties>"
            f"<dependencyManagement><dependencies>{managed}</dependencies></dependencyManagement>"
            f"<dependencies>{deps}</dependencies><build><plugins>{plugin}</plugins></build></project>")


def build(version: str = REGISTRY_VERSION, *, quarkus: str = QUARKUS_VERSION, timeout_s: float = 1800.0) -> Path:
    """The registry's ``quarkus-run.jar``: from the cache, or built with Maven into it first."""
    found = built(version)
    if found is not None:
        return found
    where = registry_dir(version)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RegistryBuildFailed(
            f"Apicurio Registry {version} is not built and Maven (mvn) is not installed: run scripts/setup.sh",
            where=str(where))
    project = where / "build"
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    (project / "pom.xml").write_text(pom_xml(version, quarkus))
    cmd = [mvn, "-q", "-B", "-f", str(project / "pom.xml"), "package", "-DskipTests",
           "-Dquarkus.package.type=fast-jar", "-Dquarkus.analytics.disabled=true"]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RegistryBuildFailed(f"Maven did not build Apicurio Registry {version} within {timeout_s:g} s",
                                  where=str(project)) from None
    output = project / "target" / "quarkus-app"
    if done.returncode != 0 or not (output / RUN_JAR).is_file():
        (project / "maven.log").write_text(done.stdout + done.stderr)
        text = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # Maven's colours, even in batch mode
        errors = [re.sub(r"^(\[ERROR\]\s*)+", "", line.strip()) for line in text.splitlines() if "ERROR" in line]
        errors = [e for e in errors if e]
        # Maven's first error line may only announce the next one ("... processing the POMs:").
        first = " ".join(errors[:2]) if errors[:1] and errors[0].endswith(":") else (errors[:1] or [""])[0]
        first = first or text.strip()[-300:] or "no output"
        raise RegistryBuildFailed(f"Maven could not build Apicurio Registry {version}: {first[:400]}",
                                  where=str(project / "maven.log"))
    target = app_dir(version)
    if target.exists():
        shutil.rmtree(target)
    output.rename(target)
    shutil.rmtree(project, ignore_errors=True)
    seconds = round(time.monotonic() - started, 1)
    (where / DONE_FILE).write_text(json.dumps({"version": version, "quarkus": quarkus, "build_s": seconds}))
    return target / RUN_JAR


def main(argv: list[str] | None = None) -> int:
    """Build the registry if it is not in the cache (what scripts/setup.sh runs); one line either way."""
    del argv
    started = time.monotonic()
    try:
        jar = build()
    except RegistryBuildFailed as err:
        print(f"kprio setup: {err}", file=sys.stderr)
        return 1
    print(f"kprio setup: Apicurio Registry {REGISTRY_VERSION} in {jar.parent} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
