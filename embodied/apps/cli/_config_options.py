"""CLI options generated from config dataclasses (not a command: only ``cmd_*`` modules are).

A config field carries its default and its one-line doc once, in the dataclass (the doc is its
entry in the class docstring's Google-style ``Args:`` / ``Attributes:`` section). A command
exposes chosen fields as typer options with :func:`config_options`; the generated option is
``--field-name`` (or a given flag), typed from the field's annotation, defaulting to the
field's default, with the field's doc as help:

    @config_options(EvalConfig, "seed", "workers", Opt("envs", flag="--env", many="repeat"))
    def eval_(policy: str = typer.Option(...), *, config: dict[str, Any]) -> None:
        run(EvalConfig(**config), policy)

The decorated function keeps its hand-written options (paths, ``--json``, ...) and receives the
generated ones in its keyword ``config``: dotted field path -> value (``"manifold.steps"``).
Mapping to typer: bool -> ``--x/--no-x`` (or a plain ``--x`` switch: ``negatable=False``);
tuples and sequences -> one comma-separated option (``many="comma"``) or a repeatable one
(``many="repeat"``); ``X | None`` -> ``X``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import typer

from embodied.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])
_SECTIONS = ("Args:", "Attributes:")
_SCALARS = (bool, int, float, str)
_SEQUENCES = (tuple, list, Sequence, typing.Sequence)
_CTX = "_config_options_ctx"  # the click context, to tell given options from defaults
_UNGIVEN = ("DEFAULT", "DEFAULT_MAP")
_FIELD_DEFAULT: Any = object()  # Opt.default when the field's default applies


@dataclass(frozen=True)
class Opt:
    """How one config field becomes an option (a plain string is ``Opt(field)``).

    Args:
        field: Field name; a dotted path reaches a nested config (``"manifold.steps"``).
        flag: Option name, e.g. ``"--env"`` (default: ``--`` + the path with ``.``/``_`` -> ``-``).
        many: For sequence fields: ``"comma"`` (one comma-separated value) or ``"repeat"``
            (the option given once per item).
        given_only: Pass the field in ``config`` only when the option is given on the command
            line (its default still shows in the help); for overrides on top of another
            config (e.g. a resumed run's).
        type: The element type, when the annotation does not name one scalar type.
        default: The command's default where it must differ from the field's (or the field
            has none); the help shows it.
        aliases: More names of the option, e.g. ``("-n",)``.
        negatable: For bool fields: ``--x/--no-x``; False: a plain ``--x`` switch (the
            field's default must be False).
    """

    field: str
    flag: str | None = None
    many: Literal["comma", "repeat"] = "comma"
    given_only: bool = False
    type: type | None = None
    default: Any = _FIELD_DEFAULT
    aliases: tuple[str, ...] = ()
    negatable: bool = True

    @property
    def option(self) -> str:
        """The option's flag, e.g. ``--manifold-steps``."""
        return self.flag or "--" + self.field.replace(".", "-").replace("_", "-")

    @property
    def param(self) -> str:
        """The Python parameter name typer passes the value under."""
        return self.option.lstrip("-").replace("-", "_")


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its doc: the entry in ``cls``'s ``Args:``/``Attributes:`` docstring section.

    A field inherited from a base dataclass keeps its doc in the base's docstring (declared
    once); a subclass's own entry wins. Continuation lines are joined into one line and RST
    double backticks dropped.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and "__doc__" in vars(klass):
            docs.update(_own_field_docs(klass.__doc__ or ""))
    return docs


def _own_field_docs(docstring: str) -> dict[str, str]:
    """The ``Args:``/``Attributes:`` entries of one docstring (see :func:`field_docs`)."""
    lines = inspect.cleandoc(docstring).splitlines()
    docs: dict[str, list[str]] = {}
    current: list[str] | None = None
    indent: int | None = None  # entries' indentation in the open section (-1: not seen yet)
    for line in lines:
        stripped = line.strip()
        depth = len(line) - len(line.lstrip())
        if stripped in _SECTIONS:
            indent, current = -1, None
            continue
        if indent is None or not stripped:
            continue
        if indent == -1:
            indent = depth
        if depth < indent:  # a new section (``Derived:``, ``Raises:``) or prose
            indent, current = None, None
            continue
        match = re.match(r"(\w+)(?: \(.*?\))?: ?(.*)", stripped)
        if depth == indent and match:
            current = docs.setdefault(match.group(1), [])
            current.append(match.group(2))
        elif current is not None:
            current.append(stripped)
    return {
        name: " ".join(" ".join(parts).replace("``", "").split()) for name, parts in docs.items()
    }


def _resolve(cls: type, path: str) -> tuple[type, dataclasses.Field[Any], Any]:
    """The dataclass owning ``path``'s last part, that field, and its resolved annotation."""
    *parents, name = path.split(".")
    for parent in parents:
        cls = typing.get_type_hints(cls)[parent]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise TypeError(f"{cls.__name__} has no field {name!r}")
    return cls, fields[name], typing.get_type_hints(cls)[name]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ...


def _path_default(cls: type, path: str, leaf: dataclasses.Field[Any]) -> Any:
    """The default of field ``path`` of ``cls``: a nested field's value in the default of the
    config that holds it (``"ppo.n_steps"`` of a config whose ``ppo`` defaults to
    ``PPOSettings(n_steps=1024)`` is 1024), else the ``leaf`` field's own default."""
    *parents, _ = path.split(".")
    if not parents:
        return _default(leaf)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    value = _default(fields[parents[0]])
    for parent in parents[1:]:
        value = getattr(value, parent, None)
    if value is ... or value is None:
        return _default(leaf)
    return getattr(value, leaf.name)


def _shape(hint: Any, spec: Opt) -> tuple[type, bool]:
    """(scalar type, is_sequence) of a field annotation."""
    options = [hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
    seqs = [o for o in options if (typing.get_origin(o) or o) in _SEQUENCES]
    chosen = seqs[0] if seqs else options[0]
    if seqs:
        args = [a for a in typing.get_args(chosen) if a is not Ellipsis]
        inner = spec.type or (args[0] if args else str)
        return inner, True
    if spec.type is not None:
        return spec.type, False
    if chosen not in _SCALARS:
        raise TypeError(f"field {spec.field!r}: no CLI type for {hint!r}; pass Opt(type=...)")
    return chosen, False


def _parameter(cls: type, spec: Opt) -> tuple[inspect.Parameter, Callable[[Any], Any]]:
    """The typer parameter of one field and the parser of its raw value."""
    owner, f, hint = _resolve(cls, spec.field)
    doc = field_docs(owner).get(f.name)
    if not doc:
        raise TypeError(f"{owner.__name__}.{f.name} has no doc in the class docstring")
    if "." in spec.field:
        doc = f"{spec.field.rsplit('.', 1)[0]}: {doc}"
    default = _path_default(cls, spec.field, f) if spec.default is _FIELD_DEFAULT else spec.default
    scalar, is_seq = _shape(hint, spec)
    decls = [spec.option]
    parse: Callable[[Any], Any] = lambda value: value  # noqa: E731
    annotation: Any = scalar
    if is_seq and spec.many == "repeat":
        annotation = list[scalar]  # type: ignore[valid-type]
        default = default if default in (None, ...) else list(default)
        parse = lambda value: None if value is None else tuple(value)  # noqa: E731
    elif is_seq:
        annotation = str
        if default not in (None, ...):
            default = ",".join(str(v) for v in default)
        name = getattr(scalar, "__name__", str(scalar))

        def parse(value: Any) -> Any:
            if value is None:
                return None
            try:
                return tuple(scalar(x.strip()) for x in value.split(",") if x.strip())
            except ValueError:
                raise ConfigError(
                    f"{spec.option} {value!r} must be comma-separated {name} values",
                    fix=f"e.g. {spec.option} {_example(scalar)}",
                ) from None

    elif scalar is bool and spec.negatable:
        decls = [f"{spec.option}/--no-{spec.option.removeprefix('--')}"]
    elif scalar is bool and default is not False:
        raise TypeError(f"field {spec.field!r}: a plain switch needs the default False")
    decls += spec.aliases
    if default is None:
        annotation = annotation | None
    info = typer.Option(default, *decls, help=doc)
    param = inspect.Parameter(
        spec.param, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation
    )
    return param, parse


def _example(scalar: Any) -> str:
    return {int: "0,1", float: "0.5,1.0"}.get(scalar, "a,b")


def config_options(cls: type, *fields: str | Opt, into: str = "config") -> Callable[[F], F]:
    """Decorator: add options generated from ``cls``'s ``fields`` to a typer command.

    The decorated function must take a keyword ``into`` (``config``); it receives the
    generated options as ``{dotted field path: value}`` (sequences as tuples; ``given_only``
    fields only when given on the command line). Its other parameters stay its own,
    hand-written, options. Decorators for several configs stack (distinct ``into`` names).
    """
    specs = [Opt(f) if isinstance(f, str) else f for f in fields]

    def decorate(func: F) -> F:
        own = inspect.signature(func, eval_str=True)
        hand = [p for name, p in own.parameters.items() if name not in (into, _CTX)]
        built = [_parameter(cls, spec) for spec in specs]
        clash = {p.name for p in hand} & {p.name for p, _ in built}
        if clash or into not in own.parameters:
            raise TypeError(f"{func.__name__}: needs a {into!r} keyword; clashing: {clash}")
        passes_ctx = _CTX in own.parameters  # an inner config_options command

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop(_CTX)
            config: dict[str, Any] = {}
            for spec, (param, parse) in zip(specs, built, strict=True):
                value = parse(kwargs.pop(param.name))
                source = ctx.get_parameter_source(param.name)
                if not (spec.given_only and source and source.name in _UNGIVEN):
                    config[spec.field] = value
            if passes_ctx:
                kwargs[_CTX] = ctx
            return func(**kwargs, **{into: config})

        ctx_param = inspect.Parameter(
            _CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context
        )
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in hand]
        signature = own.replace(parameters=[ctx_param, *params, *(p for p, _ in built)])
        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        del command.__wrapped__  # type: ignore[attr-defined]
        return command  # type: ignore[return-value]

    return decorate


def nested_options(cls: type, path: str, *, given_only: bool = False) -> tuple[Opt, ...]:
    """One option per field of the config nested at ``path`` of ``cls``, named after the field
    alone: ``ppo.n_steps`` is ``--n-steps`` (every command that embeds the same settings takes
    the same options). :func:`nest` turns the values into ``{path: {field: value}}``.

    Args:
        cls: The outer config dataclass.
        path: The nested config's field, e.g. ``"ppo"``.
        given_only: As :attr:`Opt.given_only`, for every option.
    """
    inner = typing.get_type_hints(cls)[path]
    return tuple(
        Opt(f"{path}.{f.name}", flag="--" + f.name.replace("_", "-"), given_only=given_only)
        for f in dataclasses.fields(inner)
    )


def nest(config: dict[str, Any]) -> dict[str, Any]:
    """``{"manifold.steps": 3}`` -> ``{"manifold": {"steps": 3}}``."""
    out: dict[str, Any] = {}
    for path, value in config.items():
        *parents, name = path.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = value
    return out
