"""Stand-ins for third-party modules that the reference framework's (SGLang's) helper code imports where
they are missing on a machine that has only its wheel (benchmarks/utils.py's reference_import uses them).
Its kernels and their loader need none of them, except msgspec: the loader's build cache and the
package's records are msgspec Structs, so msgspec gets a small working equivalent on dataclasses."""

from __future__ import annotations

import builtins
import dataclasses
import json
import types


class Absent:
    """Anything taken from a missing module: it can be called, subclassed, used as a decorator, indexed
    or iterated, and does nothing (false as a condition)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return Absent()

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else Absent()

    def __getitem__(self, item):
        return Absent()

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __mro_entries__(self, bases):
        return ()


def absent_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__getattr__ = Absent().__getattr__
    module.__path__ = []
    return module


NODEFAULT = dataclasses.MISSING


def field(*, default=NODEFAULT, default_factory=NODEFAULT, name=None):
    return dataclasses.field(default=default, default_factory=default_factory)


class Struct:
    """A msgspec Struct as a dataclass: options (frozen, kw_only, array_like) inherited by subclasses,
    empty-container defaults copied per instance, `__struct_fields__` the field names."""

    __struct_options__: dict = {}

    def __init_subclass__(cls, **options) -> None:
        super().__init_subclass__()
        inherited = {**cls.__struct_options__, **options}
        cls.__struct_options__ = inherited
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name, NODEFAULT)
            if isinstance(value, (list, dict, set)):
                setattr(cls, name, dataclasses.field(default_factory=type(value)))
        dataclasses.dataclass(frozen=inherited.get("frozen", False), kw_only=inherited.get("kw_only", False), eq=inherited.get("eq", True))(cls)
        cls.__struct_fields__ = tuple(f.name for f in dataclasses.fields(cls))


class DecodeError(ValueError):
    pass


def _builtins(value):
    if isinstance(value, Struct):
        items = [(f.name, _builtins(getattr(value, f.name))) for f in dataclasses.fields(value)]
        return [v for _, v in items] if value.__struct_options__.get("array_like") else dict(items)
    if isinstance(value, (list, tuple)):
        return [_builtins(v) for v in value]
    if isinstance(value, dict):
        return {k: _builtins(v) for k, v in value.items()}
    return value


def _encode(value) -> bytes:
    return json.dumps(_builtins(value)).encode()


def _decode(raw, type=None):
    try:
        value = json.loads(raw)
        item = (getattr(type, "__args__", None) or (None,))[0]
        if isinstance(item, builtins.type) and issubclass(item, Struct):
            return [item(*v) if isinstance(v, list) else item(**v) for v in value]
        return value
    except (ValueError, TypeError) as e:
        raise DecodeError(str(e)) from e


class _Coder:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def encode(self, value) -> bytes:
        return _encode(value)

    def decode(self, raw):
        return json.loads(raw)


def msgspec_module() -> types.ModuleType:
    module = types.ModuleType("msgspec")
    module.Struct, module.DecodeError, module.NODEFAULT, module.field = Struct, DecodeError, NODEFAULT, field
    module.json = types.SimpleNamespace(encode=_encode, decode=_decode, Encoder=_Coder, Decoder=_Coder)
    module.msgpack = types.SimpleNamespace(encode=_encode, decode=lambda raw, type=None: json.loads(raw), Encoder=_Coder, Decoder=_Coder)
    module.structs = types.ModuleType("msgspec.structs")
    module.structs.fields = lambda cls: dataclasses.fields(cls)
    module.structs.replace = dataclasses.replace
    module.structs.asdict = dataclasses.asdict
    module.__path__ = []
    return module
