"""The fields of kprio's Dagster resources, made from the pydantic models of kprio_core/config/.

A setting is written once, in its model (type, default, description); the resources
(:mod:`orchestration.dagster.resources`) take their fields from here, so a new setting or section needs no edit
of them. Dagster's config takes fewer types than pydantic, so each field has its value's type in kprio.yaml
(:func:`config_type`: an enum as its value, a tuple as a list, a model as a mapping); the resource validates the
values back into the model, which judges them as it judges the file.

>>> from kprio_core.config import SparkSettings
>>> fields = resource_fields(SparkSettings)
>>> fields["__annotations__"]["reader"], fields["reader"].default
(<class 'str'>, 'python')
>>> fields["__annotations__"]["remote"]
typing.Optional[str]
"""

# No `from __future__ import annotations`: the annotations made here are read by pydantic and Dagster.
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Optional, Union

import dagster as dg
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

Section = dict[str, Optional[Any]]  # noqa: UP007 (Dagster refuses `Any | None`)
"""A section of kprio.yaml as Dagster config: a mapping whose values may be null (``planner.byte_budget``)."""

_SCALARS = (str, int, float, bool)


def config_type(annotation: Any) -> Any:
    """The Dagster config type of a model field's annotation: its value's type in kprio.yaml.

    >>> from kprio_core.config import IsolationLevel, PlannerSettings
    >>> config_type(IsolationLevel), config_type(dict[str, str]), config_type(dict[str, int | bool])
    (<class 'str'>, dict[str, str], dict[str, typing.Any])
    >>> config_type(tuple[PlannerSettings, ...]), config_type(PlannerSettings | None)
    (list[dict[str, typing.Optional[typing.Any]]], typing.Optional[dict[str, typing.Optional[typing.Any]]])
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        inner = config_type(kinds[0]) if len(kinds) == 1 else Any
        return Optional[inner] if type(None) in args else inner  # noqa: UP045 (Dagster refuses `X | None`)
    if origin is typing.Literal:
        return type(args[0]) if all(type(a) is type(args[0]) for a in args) else Any
    if origin in (tuple, list, frozenset, set):
        item = args[0] if args else Any
        return list[config_type(item)] if item is not Ellipsis else list[Any]
    if origin is dict:
        key, value = args or (str, Any)
        value = config_type(value)
        return dict[str, value] if key is str and value in _SCALARS else dict[str, Any]
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return Section
        if issubclass(annotation, enum.Enum):
            return type(next(iter(annotation)).value)
        if issubclass(annotation, _SCALARS):
            return annotation
    return Any


def described(model: type[BaseModel]) -> str:
    """The first paragraph of ``model``'s docstring, on one line: what its section is for."""
    return " ".join((model.__doc__ or model.__name__).strip().split("\n\n")[0].split())


def carries(model: type[BaseModel], name: str) -> Any:
    """The ``Field`` of a resource field holding ``model``'s field ``name``: its description and default.

    >>> from kprio_core.config import SparkSettings
    >>> carries(SparkSettings, "reader").default, carries(SparkSettings, "reader").description
    ('python', "python data source or Spark's kafka source.")
    """
    info = model.model_fields[name]
    return Field(to_jsonable_python(info.get_default(call_default_factory=True)), description=info.description)


def resource_fields(model: type[BaseModel], *, exclude: typing.Collection[str] = ()) -> dict[str, Any]:
    """A class namespace with one resource field per field of ``model`` but ``exclude``: type, default, description."""
    namespace: dict[str, Any] = {"__annotations__": {}}
    for name, info in model.model_fields.items():
        if name not in exclude:
            namespace["__annotations__"][name] = config_type(info.annotation)
            namespace[name] = carries(model, name)
    return namespace


def section_fields(model: type[BaseModel], *, exclude: typing.Collection[str] = ()) -> dict[str, Any]:
    """A class namespace with one field per section of ``model`` (but ``exclude``), each as kprio.yaml writes it;
    required unless ``None`` by default (``resources_from_config`` always gives every section)."""
    namespace: dict[str, Any] = {"__annotations__": {}}
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        kind = config_type(info.annotation)
        inner = [a for a in typing.get_args(info.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        section = inner[0] if inner else info.annotation
        many = typing.get_origin(info.annotation) in (tuple, list)
        what = f"A list; each: {described(section)}" if many else described(section)
        namespace["__annotations__"][name] = kind
        optional = info.get_default(call_default_factory=True) is None
        namespace[name] = Field(None, description=what) if optional else Field(description=what)
    return namespace


def fields_class(name: str, model: type[BaseModel], *, exclude: typing.Collection[str] = (), sections: bool = False,
                 extra: Mapping[str, tuple[Any, Any]] | None = None) -> type[dg.ConfigurableResource]:
    """A ConfigurableResource base class whose fields are ``model``'s (:func:`resource_fields`), or its sections
    (``sections``: :func:`section_fields`), but ``exclude``, and ``extra`` (name -> (type, Field))."""
    namespace = (section_fields if sections else resource_fields)(model, exclude=exclude)
    for field, (kind, info) in (extra or {}).items():
        namespace["__annotations__"][field] = kind
        namespace[field] = info
    namespace["__module__"] = __name__
    return types.new_class(name, (dg.ConfigurableResource,), exec_body=lambda ns: ns.update(namespace))
