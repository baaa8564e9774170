"""Small name -> factory registries.

A new env, policy, controller or judge is one file that calls ``REGISTRY.register``;
nothing else changes. Lookups of unknown names raise :class:`UnknownNameError`
listing what exists.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from embodied.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to factories that build ``T``.

    Args:
        kind: What the registry holds, used in error messages ("env family", "policy").
        plugins: Modules imported lazily on first lookup; each registers its entries on import.
            Lazy import keeps ``import embodied`` light and lets optional extras stay optional.
    """

    def __init__(self, kind: str, plugins: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._help: dict[str, str] = {}
        self._plugins = list(plugins)
        self._plugin_errors: dict[str, str] = {}

    def register(
        self, name: str, factory: Callable[..., T] | None = None, help: str = ""
    ) -> Callable[..., T] | Callable[[Callable[..., T]], Callable[..., T]]:
        """Register ``factory`` under ``name``; usable as a decorator when ``factory`` is None."""

        def deco(f: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories and self._factories[name] is not f:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = f
            doc_lines = (f.__doc__ or "").strip().splitlines()
            self._help[name] = help or (doc_lines[0] if doc_lines else "")
            return f

        return deco(factory) if factory is not None else deco

    def _load_plugins(self) -> None:
        while self._plugins:
            mod = self._plugins.pop(0)
            try:
                importlib.import_module(mod)
            except ImportError as exc:  # optional extra not installed
                self._plugin_errors[mod] = str(exc)

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_plugins()
        return sorted(self._factories)

    def help(self, name: str) -> str:
        """One-line description of ``name``."""
        self._load_plugins()
        return self._help.get(name, "")

    def unavailable(self) -> dict[str, str]:
        """Plugin modules that failed to import (missing optional extras), with the reason."""
        self._load_plugins()
        return dict(self._plugin_errors)

    def get(self, name: str) -> Callable[..., T]:
        """The factory registered under ``name``.

        Raises:
            UnknownNameError: ``name`` is not registered; the message lists the known names.
        """
        self._load_plugins()
        if name not in self._factories:
            known = ", ".join(self.names()) or "(none)"
            extra = ""
            if self._plugin_errors:
                extra = "; not loaded: " + "; ".join(
                    f"{m} ({e})" for m, e in self._plugin_errors.items()
                )
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known: {known}{extra}",
                fix=f"use one of the known {self.kind} names",
            )
        return self._factories[name]

    def make(self, name: str, /, **kwargs: object) -> T:
        """Build the entry registered under ``name`` with ``kwargs``."""
        return self.get(name)(**kwargs)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
