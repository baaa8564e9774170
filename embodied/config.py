"""One way to (de)serialise config dataclasses: ``config_to_dict`` and ``config_from_dict``.

Every config of the stack (PDP, OpenVLA, RL and PID controllers, LIBERO protocol, judges) is a
dataclass whose fields carry their defaults; checkpoints store it as JSON. These two helpers
do the round trip the same way everywhere:

* tuples become lists on the way out and lists become tuples again on the way in, for every
  field annotated as a tuple (JSON has no tuples);
* a field whose type is itself a config dataclass is written as an object and rebuilt;
* unknown keys are refused with an error naming them and the valid keys - a checkpoint from a
  newer version, or a typo, never loads silently half-understood.

``check_options`` applies the same rule to the keyword options of a policy or expert
(``--policy-arg key=value``): known names only, values converted to the annotated types.

Validation is declared next to each field and checked by one function: a field made with
:func:`checked` carries its bounds, choices, lengths and fix; cross-field constraints are a
class-level ``rules`` tuple of :class:`Rule`; ``__post_init__`` derives what it derives, then
calls :func:`validate`. Every refusal is a :class:`FieldError` (a ``ConfigError``, exit code 2
on the command line) reading ``"<Config>: <dotted.key>=<value> <problem> (fix: ...)"``; a nested
config's key is prefixed with its parent's field (``PDP: vision.crop_shape=...``)::

    @dataclass
    class Net:
        lr: float = checked(1e-3, gt=0, fix="use e.g. 1e-3")
        d_model: int = checked(64, ge=1)
        n_heads: int = checked(4, ge=1)
        rules: ClassVar[tuple[Rule, ...]] = (
            Rule("d_model", lambda c: c.d_model % c.n_heads == 0,
                 "is not divisible by n_heads={n_heads}", "pick n_heads that divides d_model"),
        )

        def __post_init__(self) -> None:
            validate(self)
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import math
import numbers
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from embodied.errors import ConfigError, EmbodiedError

C = TypeVar("C")


def config_to_dict(config: Any, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """JSON-serialisable dict of the dataclass ``config`` (nested configs included).

    Args:
        config: A dataclass instance.
        exclude: Field names left out (e.g. runtime choices such as ``device``).
    """
    return {
        f.name: _jsonable(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if f.init and f.name not in exclude
    }


def config_from_dict(
    cls: type[C],
    data: Mapping[str, Any],
    *,
    what: str,
    ignore: Collection[str] = (),
    error: type[EmbodiedError] = ConfigError,
    fix: str | None = None,
) -> C:
    """Build the dataclass ``cls`` from ``data`` (the inverse of :func:`config_to_dict`).

    Args:
        cls: The config dataclass.
        data: Field values, as read from JSON or YAML.
        what: What the config configures, for the message (e.g. ``"PDP config"``).
        ignore: Keys that may appear in ``data`` but are not fields (derived values, format
            tags such as ``policy_type``); they are dropped.
        error: The error class for unknown keys (``CheckpointError`` for checkpoints).
        fix: How to fix unknown keys (default: use only the valid keys, listed).

    Raises:
        EmbodiedError: ``error`` naming the unknown keys and the valid ones; the dataclass's
            own validation errors pass through.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields) - set(ignore))
    if unknown:
        raise error(
            f"{what} has unknown key(s) {unknown}",
            fix=fix or f"use only the keys {sorted(fields)}",
        )
    hints = _type_hints(cls)  # type: ignore[arg-type]
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            continue
        hint = hints.get(key, _EMPTY)
        try:  # each value of the type its field declares (a file can hold anything)
            kwargs[key] = _convert(hint, _from_json(hint, value))
        except FieldError as err:  # a nested config's bad value: keyed "key.field"
            raise err.nested(_owner(cls), key) from None
        except EmbodiedError:
            raise  # a nested config's own error (unknown key, bad value) names it already
        except (TypeError, ValueError, OverflowError):
            raise error(
                f"{what} key {key}={value!r} is not {_describe(hint)}",
                fix=f"set {key} to {_describe(hint)}, or re-save the file",
            ) from None
    return cls(**kwargs)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from_json(hint: Any, value: Any) -> Any:
    """``value`` shaped for a field annotated ``hint``: lists to tuples, dicts to dataclasses.

    Raises:
        TypeError: ``hint`` is a config dataclass (not optional) and ``value`` no object.
    """
    if hint is None:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and not isinstance(value, Mapping):
        raise TypeError(f"{value!r} is not an object")  # e.g. "vision": null
    if value is None:
        return value
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if origin is tuple and isinstance(value, list | tuple):
            args = typing.get_args(option)
            inner = args[0] if len(args) == 2 and args[1] is Ellipsis else None
            if inner is not None and typing.get_origin(inner) is tuple:
                return tuple(_from_json(inner, v) for v in value)
            return tuple(value)
        is_config = isinstance(origin, type) and dataclasses.is_dataclass(origin)
        if is_config and isinstance(value, Mapping):
            return config_from_dict(origin, value, what=origin.__name__)
    return value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


_EMPTY = inspect.Parameter.empty


def check_options(
    target: Callable[..., Any],
    options: Mapping[str, Any],
    what: str,
    *,
    skip: Collection[str] = ("self", "env"),
) -> dict[str, Any]:
    """Check keyword ``options`` for ``target`` (a function or class) by its signature.

    One rule for every policy and expert option (``--policy-arg key=value``): each name must be
    a parameter of ``target`` and each value must fit its annotation. Values given as text (the
    command line) are converted: ``"0.3"`` for a float, ``"2"`` for an int, ``"true"`` for a
    bool; a list for a tuple annotation.

    Args:
        target: What the options are passed to (a class: its ``__init__``).
        options: Name -> value.
        what: How the error names the receiver (``"policy 'sine'"``).
        skip: Parameters that are not options (set by the caller).

    Returns:
        The options with converted values.

    Raises:
        ConfigError: an unknown name, or a value of the wrong type; the message names the key,
            the value and what it takes.
    """
    fn = target.__init__ if isinstance(target, type) else target  # type: ignore[misc]
    params = {
        name: p
        for name, p in inspect.signature(fn).parameters.items()
        if name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    unknown = sorted(set(options) - set(params))
    if unknown:
        known = ", ".join(params) or "none"
        raise ConfigError(
            f"{what} got unknown option(s) {unknown}; its options: {known}",
            fix=f"pass only {known} (e.g. --policy-arg {next(iter(params), 'key')}=...)",
        )
    out: dict[str, Any] = {}
    for name, value in options.items():
        hint = hints.get(name, _EMPTY)
        try:
            out[name] = _convert(hint, value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{what} option {name}={value!r} is not {_describe(hint)}",
                fix=f"pass {name} as {_describe(hint)}",
            ) from None
    return out


def _convert(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` takes it; raises TypeError/ValueError if it cannot be."""
    if hint is _EMPTY or hint is Any:
        return value
    if _is_union(hint):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value)
            except (TypeError, ValueError):
                continue
        raise ValueError(value)
    origin = typing.get_origin(hint) or hint
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise ValueError(value)
    if origin is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise ValueError(value)
    if origin is float:
        if isinstance(value, bool):
            raise TypeError(value)
        number = float(value)  # int, float or numeric text
        if isinstance(value, str) and not math.isfinite(number):
            raise ValueError(value)
        return number
    if origin is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError(value)
        return int(value)
    if origin is str:
        if not isinstance(value, str):
            raise TypeError(value)
        return value
    if origin in (tuple, list) or origin is collections.abc.Sequence:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise TypeError(value)
        items_hint = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if origin is tuple and items_hint and Ellipsis not in typing.get_args(hint):
            if len(items_hint) != len(value):
                raise ValueError(value)
            return tuple(_convert(a, v) for a, v in zip(items_hint, value, strict=True))
        inner = items_hint[0] if items_hint else _EMPTY
        items = [_convert(inner, v) for v in value]
        return tuple(items) if origin is tuple else items
    return value


def _describe(hint: Any) -> str:
    """What a value of ``hint`` is, in words."""
    if hint is _EMPTY or hint is Any:
        return "any value"
    if _is_union(hint):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    origin = typing.get_origin(hint) or hint
    words = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    if origin is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (tuple, list) or origin is collections.abc.Sequence:
        return "a list such as [0.2, 0.4]"
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        return f"an object ({origin.__name__})"
    return words.get(origin, getattr(origin, "__name__", str(origin)))


# ---- validation: constraints declared next to each field, checked by one function ----------


class FieldError(ConfigError):
    """A config field (or a rule over several fields) has a bad value.

    The message is ``"<Owner>: <dotted.key>=<value> <problem> (fix: ...)"``; ``key`` and
    ``detail`` are kept so a parent config can re-raise it with its own dotted prefix.

    Args:
        message: The full message (as :class:`ConfigError` takes it).
        fix: How to fix it.
        key: Dotted key of the field, relative to ``owner``.
        detail: The message after the key (``"=0 must be > 0"``).
        owner: Name of the config class the key belongs to.
    """

    def __init__(
        self,
        message: str,
        fix: str | None = None,
        *,
        key: str = "",
        detail: str = "",
        owner: str = "",
    ) -> None:
        super().__init__(message, fix)
        self.key = key
        self.detail = detail
        self.owner = owner

    @classmethod
    def make(cls, owner: str, key: str, detail: str, fix: str | None) -> FieldError:
        """The error for ``key`` of the config ``owner``."""
        return cls(f"{owner}: {key}{detail}", fix, key=key, detail=detail, owner=owner)

    def nested(self, owner: str, prefix: str) -> FieldError:
        """The same error as the parent config ``owner`` reports it: key ``prefix.key``."""
        return FieldError.make(owner, f"{prefix}.{self.key}", self.detail, self.fix)


@dataclasses.dataclass(frozen=True)
class Check:
    """Constraints of one config field (see :func:`checked`)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    choices: Collection[Any] | None = None
    finite: bool = True
    min_len: int | None = None
    max_len: int | None = None
    fix: str = ""

    def default_fix(self) -> str:
        """The fix when none is given: the constraints, in words."""
        if self.choices is not None:
            return f"use one of {tuple(self.choices)}"
        words = [
            f"{word} {bound}"
            for word, bound in ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
            if bound is not None
        ]
        if words:
            return "use a value " + " and ".join(words)
        if self.min_len is not None or self.max_len is not None:
            return f"give {self.min_len or 0} to {self.max_len or 'any number of'} item(s)"
        return "use a finite number"

    def problem(self, value: Any, hint: Any = None) -> tuple[str, Any, str] | None:
        """What is wrong with ``value`` of a field annotated ``hint``, or ``None``.

        The value must be of the annotated type (:func:`_type_problem`); a sequence's length
        is checked against the lengths, then each item (its type, the bounds, the choices);
        any other value against the bounds and the choices.

        Returns:
            ``(key suffix, bad value, problem)``: the suffix is ``"[i]"`` when item ``i`` is
            the bad value, else ``""``.
        """
        bad = _type_problem(value, hint)
        if bad is not None:
            return "", value, bad
        if value is None:
            return None
        if isinstance(value, tuple | list):
            for limit, too in ((self.min_len, "fewer"), (self.max_len, "more")):
                if limit is not None and (
                    len(value) < limit if too == "fewer" else len(value) > limit
                ):
                    return "", value, f"has {len(value)} item(s), {too} than {limit}"
            item_hint = _item_hint(hint)
            for i, item in enumerate(value):
                bad = _type_problem(item, item_hint) or self._item_problem(item)
                if bad is not None:
                    return f"[{i}]", item, bad
            return None
        if isinstance(value, str):
            if self.min_len is not None and len(value) < self.min_len:
                short = (
                    "must not be empty" if self.min_len == 1 else f"is shorter than {self.min_len}"
                )
                return "", value, short
            if self.max_len is not None and len(value) > self.max_len:
                return "", value, f"is longer than {self.max_len} characters"
        bad = self._item_problem(value)
        return None if bad is None else ("", value, bad)

    def _item_problem(self, value: Any) -> str | None:
        if self.choices is not None and value not in self.choices:
            return f"must be one of {tuple(self.choices)}"
        bounds = (self.gt, self.ge, self.lt, self.le)
        if not _is_number(value):
            return None if all(b is None for b in bounds) else "must be a number"
        number = _as_float(value)
        if math.isnan(number):
            return "must be a number, not NaN"
        if self.finite and math.isinf(number):
            return "must be finite"
        for bound, ok, word in (
            (self.gt, lambda b: number > b, ">"),
            (self.ge, lambda b: number >= b, ">="),
            (self.lt, lambda b: number < b, "<"),
            (self.le, lambda b: number <= b, "<="),
        ):
            if bound is not None and not ok(bound):
                return f"must be {word} {bound}"
        return None


def checked(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    fix: str = "",
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    choices: Collection[Any] | None = None,
    finite: bool = True,
    min_len: int | None = None,
    max_len: int | None = None,
) -> Any:
    """A dataclass field with its constraints, checked by :func:`validate`.

    The value must first be of the field's annotated type: an ``int`` field an integer (not a
    bool, not ``2.0``), a ``float`` field a real number (not a bool, not text), a ``str`` or
    ``bool`` field one, a tuple field a list or tuple (items of the item type), a config field
    that dataclass; ``None`` only where the annotation allows it (``X | None``; it then passes
    every constraint). Numeric bounds and ``choices`` apply to the value, or to each item of a
    tuple/list value (the error then names ``key[i]``); ``min_len``/``max_len`` to the length
    of a tuple, list or string. A number is never NaN, and finite unless ``finite=False``.
    An ``int`` field refuses ``True``/``False`` whether checked or not.

    Example::

        @dataclass
        class Net:
            lr: float = checked(1e-3, gt=0, fix="use e.g. 1e-3")
            def __post_init__(self) -> None:
                validate(self)

    Args:
        default: The default value.
        default_factory: Or a factory of it (for mutable and nested-config defaults).
        fix: How to fix a bad value (the error's ``fix:``); default: the constraints in
            words (``"use a value > 0"``, ``"use one of ('a', 'b')"``).
        gt: The value must be greater than this.
        ge: ... greater than or equal to this.
        lt: ... less than this.
        le: ... less than or equal to this.
        choices: The allowed values.
        finite: Refuse infinities (NaN is always refused).
        min_len: Fewest items (1: non-empty).
        max_len: Most items.

    Returns:
        A ``dataclasses.field`` whose metadata holds the :class:`Check`.
    """
    check = Check(gt, ge, lt, le, choices, finite, min_len, max_len, fix)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"check": check}
    )


@dataclasses.dataclass(frozen=True)
class Rule:
    """A constraint over several fields of one config, declared in its class's ``rules``.

    The error reads ``"<key>=<value> <problem> (fix: <fix>)"``; ``problem`` is a format
    template over the config's attributes (``"must be <= horizon={horizon}"``; ``{_prefix}``
    is the config's dotted key and a dot when :func:`validate` was given one) or a function
    of the config; ``fix`` is plain text or a function of the config.

    Args:
        key: The field the error names (dotted with the parent's key when nested); a dotted
            key names an entry of a dict or nested field (``"dino.patch_size"``).
        ok: True when the config satisfies the rule.
        problem: What is wrong, after ``key=value``.
        fix: How to fix it (not a template: braces are kept).
        show_value: Print ``key=value``; ``False`` prints the key alone (a secret such as a
            token must not end up in a log).
    """

    key: str
    ok: Callable[[Any], bool]
    problem: str | Callable[[Any], str]
    fix: str | Callable[[Any], str]
    show_value: bool = True


class _Attrs(dict[str, Any]):
    """The attributes of a config, for ``str.format_map`` (and ``_prefix``: the config's own
    dotted key and a dot, or ``""``)."""

    def __init__(self, config: Any, prefix: str = "") -> None:
        super().__init__(_prefix=f"{prefix}." if prefix else "")
        self.config = config

    def __missing__(self, key: str) -> Any:
        return getattr(self.config, key)


def _text(template: str | Callable[[Any], str], config: Any, prefix: str = "") -> str:
    if callable(template):
        return template(config)
    return template.format_map(_Attrs(config, prefix))


def _owner(config: Any) -> str:
    """How messages name ``config``: its ``config_name`` (a class attribute, or a property of
    the instance), else its class name."""
    cls = config if isinstance(config, type) else type(config)
    name = getattr(config, "config_name", None)
    return name if isinstance(name, str) else cls.__name__


def validate(config: Any, prefix: str = "") -> None:
    """Check every constraint of the dataclass ``config``: call it from ``__post_init__``.

    In order: an ``int`` field holding a bool; each field's :func:`checked` constraints (the
    annotated type first: a checked field holds what its annotation says); nested configs
    (dataclasses that declare checks; re-checked, errors keyed ``parent.child``); the class's
    ``rules`` (a ``ClassVar`` tuple of :class:`Rule`), only once every field is valid.

    Args:
        config: The dataclass instance.
        prefix: Dotted key of ``config`` inside a larger config (``"joints[2]"``) when it
            knows it; its errors then name ``prefix.field``.

    Raises:
        FieldError: (a :class:`ConfigError`) naming the dotted key, the bad value and the fix.
    """

    def key(name: str) -> str:
        return f"{prefix}.{name}" if prefix else name

    owner = _owner(config)
    cls: type = type(config)
    hints = _safe_hints(cls)
    for f in dataclasses.fields(config):
        if not hasattr(config, f.name):  # an init=False field not derived yet
            continue
        value = getattr(config, f.name)
        if isinstance(value, bool) and _int_hint(hints.get(f.name)):
            raise FieldError.make(
                owner, key(f.name), f"={value!r} must be an integer, not a bool", "give a number"
            )
        check = f.metadata.get("check")
        if isinstance(check, Check):
            problem = check.problem(value, hints.get(f.name, _EMPTY))
            if problem is not None:
                suffix, bad, text = problem
                raise FieldError.make(
                    owner,
                    key(f.name) + suffix,
                    f"={bad!r} {text}",
                    check.fix or check.default_fix(),
                )
        kind: type = type(value)
        if kind is not type and _declares_checks(kind):
            try:
                validate(value)
            except FieldError as err:
                raise err.nested(owner, key(f.name)) from None
    for rule in getattr(cls, "rules", ()):
        if not isinstance(rule, Rule):  # a dataclass of another kind with a `rules` attribute
            continue
        try:
            ok = bool(rule.ok(config))
        except (TypeError, ValueError, KeyError, ArithmeticError):  # values it cannot judge
            ok = False
        if not ok:
            shown = f"={_lookup(config, rule.key)!r}" if rule.show_value else ""
            detail = f"{shown} {_text(rule.problem, config, prefix)}"
            fix = rule.fix(config) if callable(rule.fix) else rule.fix
            raise FieldError.make(owner, key(rule.key), detail, fix)


def nested(cls: type[C], value: C | Mapping[str, Any], key: str, parent: Any) -> C:
    """``value`` as the nested config ``cls`` (built from a mapping), errors keyed ``key.``.

    Args:
        cls: The nested config dataclass.
        value: An instance, or its fields as a mapping.
        key: The parent's field name.
        parent: The parent config (or its class), which the message names.

    Raises:
        FieldError: the nested config's error, its key prefixed with ``key.``.
    """
    if not isinstance(value, Mapping):
        return value
    try:
        return cls(**value)
    except FieldError as err:
        raise err.nested(_owner(parent), key) from None


def _is_number(value: Any) -> bool:
    """A real number (numpy scalars included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_float(value: Any) -> float:
    """``value`` (a real number) as a float; an int too large for one is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` is not of the annotated type ``hint`` (``None`` if it is, or if the
    annotation is not one of the types checked: int, float, str, bool, tuple/list, a config
    dataclass, each optionally ``| None``)."""
    if hint is _EMPTY or hint is None or hint is Any:
        return None
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    if value is None:
        return None if type(None) in options else "must not be None"
    kinds = [typing.get_origin(a) or a for a in options if a is not type(None)]
    if len(kinds) != 1:
        return None
    kind = kinds[0]
    if kind in (int, float):
        word = _WORDS[kind]
        if isinstance(value, bool):
            return f"must be {word}, not a bool"
        ok = isinstance(value, numbers.Integral if kind is int else numbers.Real)
        return None if ok else f"must be {word}"
    if kind in (str, bool):
        return None if isinstance(value, kind) else f"must be {_WORDS[kind]}"
    if kind in (tuple, list, collections.abc.Sequence):
        return None if isinstance(value, tuple | list) else "must be a list"
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return None if isinstance(value, kind) else f"must be a {kind.__name__}"
    return None


def _item_hint(hint: Any) -> Any:
    """The item annotation of a ``tuple[X, ...]`` / ``tuple[X, X]`` / ``list[X]`` hint."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    for option in options:
        args = [a for a in typing.get_args(option) if a is not Ellipsis]
        if args and all(a == args[0] for a in args):
            return args[0]
    return _EMPTY


def _lookup(config: Any, key: str) -> Any:
    """The value at the dotted ``key`` of ``config`` (fields, then dict entries)."""
    value = config
    for part in key.split("."):
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return value


@functools.cache
def _declares_checks(cls: type) -> bool:
    """Whether ``cls`` is a config dataclass of this mechanism (checked fields or rules)."""
    if not dataclasses.is_dataclass(cls):
        return False
    if any(isinstance(r, Rule) for r in getattr(cls, "rules", ())):
        return True
    return any("check" in f.metadata for f in dataclasses.fields(cls))


@functools.cache
def _safe_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve at run time: no type checks
        return {}


def _int_hint(hint: Any) -> bool:
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    return int in options
