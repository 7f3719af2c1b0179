"""Reading the configuration: ``kprio.yaml`` (found as the package docstring says), the environment's overrides,
and one line per validation failure naming the key and where it came from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kprio_core.config.base import number_problem
from kprio_core.config.environment import (
    DEFAULT_CONFIG_FILE,
    ENV_BOOTSTRAP,
    ENV_CONFIG_PATH,
    ENV_KAFKA_PREFIX,
    ENV_KAFKA_TIMEOUT,
    is_secret_setting,
    variable_setting,
)
from kprio_core.config.kprio_config import KprioConfig
from kprio_core.config.yaml_file import read_yaml
from kprio_core.errors import ConfigError


def _key(loc: tuple) -> str:
    return ".".join(str(part) for part in loc if part != "[key]")  # pydantic's mark of a mapping's key


def _problems(err: ValidationError) -> list[dict]:
    """pydantic's errors, one per problem: the branches of a union a value matched none of are one."""
    errors = err.errors()
    # A bad item of `topics` also makes pydantic report the tuple as too short: not a second problem.
    errors = [
        e for e in errors
        if not (e["type"] == "too_short" and any(o["loc"][: len(e["loc"])] == e["loc"] and o is not e for o in errors))
    ] or errors
    problems: list[dict] = []
    branches: dict[tuple, dict] = {}
    for e in errors:
        loc = tuple(e["loc"])
        # A union's branches come as one error each: the value's loc plus the branch's type, the same input.
        twins = [o for o in errors if o is not e and len(o["loc"]) == len(loc) and tuple(o["loc"][:-1]) == loc[:-1]
                 and o["input"] is e["input"] and (isinstance(e["input"], dict | list) or _branch(loc[-1]))]
        if not twins:
            problems.append(e)
            continue
        if loc[:-1] not in branches:
            kinds = [str(o["loc"][-1]) for o in errors if tuple(o["loc"][:-1]) == loc[:-1]]
            branches[loc[:-1]] = {"loc": loc[:-1], "type": "union", "input": e["input"],
                                  "msg": f"must be one of {', '.join(kinds)}, not {kind_of(e['input'])}"}
            problems.append(branches[loc[:-1]])
    return problems


_BRANCHES = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "none"})


def _branch(part: object) -> bool:
    """Whether a part of an error's loc names a branch of a union (``str``, ``int``, ``TopicSettings``)."""
    return isinstance(part, str) and (part in _BRANCHES or part[:1].isupper() or "[" in part)


_SHAPES = {"model_type": "a mapping of settings", "model_attributes_type": "a mapping of settings",
           "dict_type": "a mapping", "tuple_type": "a list", "list_type": "a list", "string_type": "a string",
           "int_type": "a whole number", "float_type": "a number", "bool_type": "true or false"}
"""pydantic's type errors as the YAML shape they want (pydantic's words name Python classes the user never wrote)."""


def _message(problem: Mapping) -> str:
    """pydantic's message, or the validator's own for a ValueError one of ours raised (no 'Value error, ')."""
    error = (problem.get("ctx") or {}).get("error")
    if problem["type"] in ("value_error", "assertion_error") and error is not None:
        return str(error)
    if problem["type"] in _SHAPES:
        value = problem.get("input")
        quote = (": put it in quotes to keep it as text (YAML reads 42, 1e3 or 0x10 as a number)"
                 if problem["type"] == "string_type" and isinstance(value, int | float) else "")
        return f"must be {_SHAPES[problem['type']]}, not {kind_of(value)}{quote}"
    return problem["msg"]


def _loc(problem: Mapping) -> tuple:
    """The problem's key; one inside the mapping a validator checked when it said which (:class:`SettingError`)."""
    error = (problem.get("ctx") or {}).get("error")
    key = getattr(error, "key", None)
    return (*problem["loc"], key) if isinstance(key, str) else tuple(problem["loc"])


def config_error(err: ValidationError, source: str, origins: Mapping[tuple, str] | None = None) -> ConfigError:
    """One ConfigError for a failed validation: the key, what is wrong (never the value: it may be a secret), how
    many more problems, and where (``source``, or the variable that set it)."""
    problems = _problems(err)
    first = problems[0]
    loc = _loc(first)
    key = _key(loc)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    # A check of the whole configuration has no key of its own: its message names the keys.
    error = ConfigError(f"{key}: {_message(first)}{more}" if key else f"{_message(first)}{more}",
                        where=origin_of(loc, source, origins or {}))
    value = first.get("input")  # the value, or the mapping a validator of a section checked
    error.shown = tuple(v for v in (value.values() if isinstance(value, dict) else [value]) if isinstance(v, str))
    return error


def origin_of(loc: tuple, source: str, origins: Mapping[tuple, str]) -> str:
    """Where the setting at ``loc`` came from: ``source`` (the file), or the environment variable that set it."""
    exact = [variable for prefix, variable in origins.items() if loc[: len(prefix)] == prefix]
    # A check of a whole mapping (kafka.client) may be failed by a key from the file or from the environment.
    inside = sorted(variable for prefix, variable in origins.items() if loc and prefix[: len(loc)] == loc)
    if exact:
        return f"{exact[-1]} in the environment"
    if inside:
        return f"{source}, or {', '.join(inside)} in the environment"
    return source


@dataclass(frozen=True)
class ConfigSources:
    """Where a loaded configuration's settings came from (file, defaults, environment), for errors met on use.

    >>> sources = ConfigSources("kprio.yaml", {("kafka", "bootstrap_servers"): "KPRIO_BOOTSTRAP_SERVERS"})
    >>> sources.where("kafka.bootstrap_servers", "b:9092"), sources.where("kafka.client")
    ('KPRIO_BOOTSTRAP_SERVERS b:9092 in the environment', 'kafka.client in kprio.yaml')
    """

    source: str
    origins: Mapping[tuple, str] = field(default_factory=dict)
    written: frozenset[str] | None = None
    """The keys the file sets (``kafka.bootstrap_servers``), of its sections and one level inside them."""

    def where(self, setting: str, value: str | None = None) -> str:
        """``setting`` (with its ``value``, never a secret's) and where it came from."""
        shown = f" {value}" if value else ""
        origin = origin_of(tuple(setting.split(".", 2)), self.source, self.origins)
        if origin.endswith(" in the environment") and "," not in origin:
            return origin.replace(" in the environment", f"{shown} in the environment")
        if self.source == BUILT_IN:
            return f"{setting}{shown}, the built-in default: no configuration file was found"
        if self.written is not None and ".".join(setting.split(".")[:2]) not in self.written and origin == self.source:
            return f"{setting}{shown}, the default: not set in {self.source}"
        return f"{setting}{shown} in {origin}"


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line naming the key, what is wrong, how many more problems there are, and the source."""
    return str(config_error(err, source))


def _environment_overrides(raw: dict, env: Mapping[str, str]) -> tuple[dict, dict[tuple, str]]:
    """``raw`` with ``env``'s non-empty ``KPRIO_*`` variables merged into its kafka section, and which keys they set.

    Not pydantic-settings: it maps a variable to a field by name, while any ``KPRIO_KAFKA_<SETTING>`` becomes a
    dotted key of ``client`` or ``secrets``; a custom source would be longer than this loop.
    """
    kafka = dict(raw.get("kafka") or {})
    client, secrets = dict(kafka.get("client") or {}), {}
    origins: dict[tuple, str] = {}
    for name, value in env.items():
        if not value:
            continue
        if name == ENV_BOOTSTRAP:
            kafka["bootstrap_servers"] = value
            origins[("kafka", "bootstrap_servers")] = name
        elif name == ENV_KAFKA_TIMEOUT:
            kafka["timeout_s"] = value
            origins[("kafka", "timeout_s")] = name
        elif name.startswith(ENV_KAFKA_PREFIX):
            setting = variable_setting(name)
            section = "secrets" if is_secret_setting(setting) else "client"
            (secrets if section == "secrets" else client)[setting] = value
            origins[("kafka", section, setting)] = name
    return {**raw, "kafka": {**kafka, "client": client, "secrets": secrets}}, origins


def kind_of(value: object) -> str:
    """What a YAML value is, in words.

    >>> kind_of([1]), kind_of(5), kind_of("x"), kind_of({"a": 1})
    ('a list', 'a number', 'a string', 'a mapping')
    """
    if value is None:
        return "nothing (null)"
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (Mapping, "a mapping"),
             (list | tuple, "a list"))
    return next((name for kind, name in kinds if isinstance(value, kind)), f"a {type(value).__name__}")


BUILT_IN = "built-in defaults"


def numbers_problem(data: object, loc: tuple = ()) -> tuple[tuple, str] | None:
    """The first number anywhere in ``data`` (a value or a key) that no setting takes
    (:func:`~kprio_core.config.base.number_problem`), and where; or None. Checked before any setting reads it.

    >>> numbers_problem({"slo": {"max_age_s": {10**40: 5}}}), numbers_problem({"kafka": {"client": {"a": [1e400]}}})
    ((('slo', 'max_age_s'), 'a key: 1e+40 does not fit a 64-bit integer'), (('kafka', 'client', 'a', 0), \
'Input should be a finite number'))
    """
    if isinstance(data, Mapping):
        for key, value in data.items():
            problem = number_problem(key)
            if problem is not None:
                return loc, f"a key: {problem}"
            found = numbers_problem(value, (*loc, key))
            if found is not None:
                return found
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            found = numbers_problem(value, (*loc, i))
            if found is not None:
                return found
    else:
        problem = number_problem(data)
        return None if problem is None else (loc, problem)
    return None


def parse_config(raw: Mapping | None, source: str = "configuration", env: Mapping[str, str] | None = None) -> KprioConfig:
    """Validate a mapping (as read from YAML) plus environment overrides into a config."""
    return parse_config_sources(raw, source, env)[0]


def parse_config_sources(raw: Mapping | None, source: str = "configuration", env: Mapping[str, str] | None = None,
                         *, on_this_host: bool = False) -> tuple[KprioConfig, ConfigSources]:
    """:func:`parse_config`, and where its settings came from; ``on_this_host``: it runs here, so its files and
    credentials are checked too (:func:`kprio_core.config.files.config_problem`)."""
    from kprio_core.config.files import config_problem

    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"the top level must be a mapping of sections, not {kind_of(raw)}", where=source)
    data = dict(raw or {})
    # The environment overrides below merge into these sections, so they must be mappings first.
    kafka = data.get("kafka")
    if kafka is not None and not isinstance(kafka, Mapping):
        raise ConfigError(f"kafka: must be a mapping, not {kind_of(kafka)}", where=source)
    client = (kafka or {}).get("client")
    if client is not None and not isinstance(client, Mapping):
        raise ConfigError(f"kafka.client: must be a mapping, not {kind_of(client)}", where=source)
    if "secrets" in (data.get("kafka") or {}):
        raise ConfigError("kafka.secrets: secrets come only from KPRIO_KAFKA_* environment variables", where=source)
    written = {f"{section}.{key}" for section, values in data.items() if isinstance(values, Mapping)
               for key in values} | set(data)
    data, origins = _environment_overrides(data, os.environ if env is None else env)
    found = numbers_problem(data)
    if found is not None:
        loc, what = found
        raise ConfigError(f"{_key(loc)}: {what}" if loc else what, where=origin_of(loc, source, origins))
    try:
        config = KprioConfig.model_validate(data)
    except ValidationError as err:
        raise config_error(err, source, origins) from None
    found = config_problem(config, os.environ if env is None else env) if on_this_host else None
    if found is not None:
        loc, what = found
        raise ConfigError(f"{_key(loc)}: {what}", where=origin_of(loc, source, origins))
    return config, ConfigSources(source, origins, frozenset(written))


def config_path(explicit: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The file to load: explicit path, then $KPRIO_CONFIG, then ./kprio.yaml if present."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get(ENV_CONFIG_PATH):
        return Path(env[ENV_CONFIG_PATH])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


def load_config(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> KprioConfig:
    """Load and validate the configuration (see the module docstring for the search order)."""
    return load_config_sources(path, env)[0]


def load_config_sources(path: str | os.PathLike | None = None,
                        env: Mapping[str, str] | None = None) -> tuple[KprioConfig, ConfigSources]:
    """:func:`load_config`, and where its settings came from (for the errors of their first use)."""
    chosen = config_path(path, env)
    if chosen is None:
        return parse_config_sources({}, BUILT_IN, env, on_this_host=True)
    where = str(chosen) if path or chosen == Path(DEFAULT_CONFIG_FILE) else f"{chosen}, named by {ENV_CONFIG_PATH}"
    return parse_config_sources(read_yaml(chosen, where), where, env, on_this_host=True)
