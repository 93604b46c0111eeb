"""The one way pyserini-ext changes Pyserini: `install` replaces an attribute or a dict entry with one built from
it, `set_entry` sets a dict entry, `on_import` runs a function right after a module has executed (a post-import
hook). Each change is recorded in `INSTALLED`; a value `install` put in place carries MARK, so installing again
changes nothing.

Standard library only, and cheap: `_startup` imports this at every interpreter start (so no `importlib.abc` or
`typing`, whose imports would cost more than everything else here; a finder needs only `find_spec`).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MARK = "_pyserini_ext"
INSTALLED: dict[str, str] = {}  # what was changed ("pyserini.util.download_prebuilt_index") -> how, in order
_HOOKS: dict[str, list] = {}  # module name -> what runs after it has executed


def is_ours(value) -> bool:
    """Whether `value` was put in place by `install` (it carries MARK)."""
    return bool(getattr(value, MARK, False))


def _name(owner) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return getattr(owner, "__name__", type(owner).__name__)


def install(owner, name: str, make: Callable, descriptor: Callable | None = None, where: str | None = None) -> bool:
    """Set `owner.<name>` (`owner[name]` for a dict) to `make(its current value)`, unless that value is ours already.

    `descriptor` (classmethod, staticmethod) wraps what `make` returns; a classmethod's current function is passed
    to `make` unbound. `where` names a dict in the record. Returns whether anything changed.
    """
    entry = isinstance(owner, dict)
    current = owner.get(name) if entry else getattr(owner, name)
    if is_ours(current):
        return False
    value = make(current.__func__ if descriptor is classmethod else current)
    setattr(value, MARK, True)
    if descriptor is not None:
        value = descriptor(value)
    if entry:
        owner[name] = value
    else:
        setattr(owner, name, value)
    INSTALLED[f"{where}[{name!r}]" if entry else f"{_name(owner)}.{name}"] = "replaced"
    return True


def set_entry(mapping: dict, key: str, value, where: str) -> None:
    """`mapping[key] = value`, recorded under `where` (the dict's name); setting it again is harmless."""
    mapping[key] = value
    INSTALLED[f"{where}[{key!r}]"] = "set"


def on_import(module_name: str, hook: Callable | str) -> None:
    """Run `hook(module)` right after `module_name` has executed, or now if it has; a string names the module whose
    `install(module)` is the hook (imported only then). Once per module and hook."""
    hooks = _HOOKS.setdefault(module_name, [])
    if hook in hooks:
        return
    hooks.append(hook)
    INSTALLED[f"import {module_name}"] = "hooked"
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    if module_name in sys.modules:
        _run(hook, sys.modules[module_name])


def _run(hook: Callable | str, module) -> None:
    if isinstance(hook, str):
        importlib.import_module(hook).install(module)
    else:
        hook(module)


class _PostImportFinder:
    """Finds nothing itself; wraps the real loader of a hooked module so its hooks run after it."""

    def find_spec(self, fullname, path=None, target=None):
        hooks = _HOOKS.get(fullname)
        if not hooks:
            return None
        sys.meta_path.remove(self)  # let the regular finders resolve the module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            for hook in list(hooks):
                _run(hook, module)

        spec.loader.exec_module = exec_module
        return spec
